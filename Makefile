# The two set-up commands (README.md): `make run` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
MXMOE := $(BUILD)/mxmoe
# The Python test environment; the build compiles the torch op when it exists.
VENV := $(BUILD)/venv
PY := $(VENV)/bin/python

.PHONY: deps venv configure build run test
deps:
	@scripts/install-deps.sh

venv:
	@scripts/python-env.sh $(VENV)

CUTLASS := $(BUILD)/_deps/cutlass

configure: deps
	@scripts/install-cutlass.sh $(CUTLASS)
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXMOE_CUTLASS_DIR=$(abspath $(CUTLASS)) \
	  $(if $(wildcard $(PY)),-DMXMOE_PYTHON=$(abspath $(PY))) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: one gpt-oss-20b-shaped MoE layer on synthetic weights, on the
# best backend this machine has, then a short benchmark.
run: build
	$(MXMOE) info
	$(MXMOE) run --random-weights --seed 1 --experts 32 --hidden 2880 --intermediate 2880 \
	  --topk 4 --tokens 64 --output $(BUILD)/y.npy
	$(MXMOE) bench --model gpt-oss-20b --quick --json $(BUILD)/bench.json

# CPU tests always run; GPU tests skip (and say so) where no GPU is present.
# First 60 s of fuzzing the safetensors header parser (clang, own build dir),
# then the C++ tests, then the package installed into the venv from the same
# build folder (pyproject.toml's build-dir) and its pytest suite; last, a
# CPU-only build (own build dir) whose C++, CLI and Python must say that the
# GPU backends are not built, and why.
test: venv
	$(MAKE) build
	scripts/fuzz.sh 60
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	$(PY) -m pip install -q --no-build-isolation --no-deps .
	cd tests/python && ../../$(PY) -m pytest -q -rs -p no:cacheprovider .
	scripts/check-left-out.sh $(PY)
