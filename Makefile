# The two commands that do everything: `make run` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: run test build setup configure bench format format-check clean

run: build
	$(BUILD)/bin/prism mnist

test: build format-check
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

setup:
	bash scripts/setup.sh

configure: setup
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS); fi

build: configure
	cmake --build $(BUILD) -j$(JOBS)

bench: build
	$(BUILD)/bin/prism-bench

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

format-check:
	@files=$$(git ls-files '*.cpp' '*.h'); \
	if [ -n "$$files" ] && ! clang-format --dry-run --Werror $$files; then \
	  echo "format-check: run 'make format'"; exit 1; fi

clean:
	rm -rf $(BUILD)
