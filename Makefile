# kforge: the two entry points are `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build test demo gpu-check clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The demo needs the three binaries, not the tests (a full build is ~4x the work).
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target kforge kforge-worker kforge-jail
	@bash scripts/demo.sh $(BUILD)

gpu-check:
	@bash scripts/gpu-check.sh

clean:
	rm -rf $(BUILD)
