// mxmoe: command-line front end (info, run, bench).
#include <cstdio>

int main() {
  std::puts("mxmoe");
  return 0;
}
