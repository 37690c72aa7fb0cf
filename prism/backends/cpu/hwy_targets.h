// The instruction sets the CPU kernels are compiled for with Highway's dynamic dispatch: the
// build's baseline (all of them under -march=native), AVX2, AVX-512 (Highway's AVX3) and
// AVX-512 with the Ice Lake / Zen 4 extensions (AVX3_DL). SSSE3 and SSE4 are left out: every
// x86-64 server of the last decade has AVX2, and each target compiled costs build time.
// Every file that includes a Highway header includes this one first, so that all of them
// agree on the set.
#pragma once

#ifdef HIGHWAY_HWY_DETECT_TARGETS_H_
#error "prism/backends/cpu/hwy_targets.h must be included before any Highway header"
#endif

#define HWY_WANT_AVX3_DL 1
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
