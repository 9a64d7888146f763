// Lets the host compiler parse CUTLASS's host utilities (tools/util/include:
// the reference GEMMs of cutlass/util/reference/host/). They include
// cutlass/numeric_conversion.h, whose packed converters call the CUDA device
// intrinsics below with arguments that do not depend on a template parameter.
// nvcc declares them; a host compiler looks such names up where the template
// is defined (two-phase lookup) and rejects them, although the host never
// instantiates those converters. Declared here and defined nowhere: a host
// instantiation would fail to link rather than run. Include before CUTLASS.
#pragma once

#ifndef __CUDACC__
#include <cuda_fp16.h>

int __dp4a(int a, int b, int c);
unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int selector);
__half2 __hfma2(__half2 a, __half2 b, __half2 c);
#endif
