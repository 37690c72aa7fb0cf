# The two commands that do everything: `make run` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: run test build setup configure bench format format-check clean fuzz-smoke test-sanitize

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

# The libFuzzer targets (fuzz/), built with clang and the sanitizers in their own tree, each run
# from its corpus for a fixed number of inputs (fuzz/smoke.sh; FUZZ_SECONDS caps a slow
# machine).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz-smoke: setup
	@if [ ! -f $(FUZZ_BUILD)/build.ninja ]; then \
	  CC=clang-15 CXX=clang++-15 cmake -S . -B $(FUZZ_BUILD) -G Ninja \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRISM_FUZZ=ON -DPRISM_BUILD_TESTS=OFF \
	    -DPRISM_BUILD_BENCH=OFF -DPRISM_PYTHON=OFF; fi
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_targets
	bash fuzz/smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The unit tests (and the CLI some of them run) built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DPRISM_SANITIZE=ON, the default compiler) in their own tree,
# then run: any report, a leak included (but those of tools/lsan_suppressions.txt), fails them.
SANITIZE_BUILD ?= build-sanitize
test-sanitize: setup
	@if [ ! -f $(SANITIZE_BUILD)/build.ninja ]; then \
	  cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DPRISM_SANITIZE=ON -DPRISM_BUILD_BENCH=OFF -DPRISM_PYTHON=OFF; fi
	cmake --build $(SANITIZE_BUILD) -j$(JOBS) --target prism-unit-tests prism
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan_suppressions.txt \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(SANITIZE_BUILD)/bin/prism-unit-tests

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

format-check:
	@files=$$(git ls-files '*.cpp' '*.h'); \
	if [ -n "$$files" ] && ! clang-format --dry-run --Werror $$files; then \
	  echo "format-check: run 'make format'"; exit 1; fi

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(SANITIZE_BUILD)
