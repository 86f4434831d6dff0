/* SPDX-License-Identifier: MIT */
#ifndef NVFENCE_EXPORT_H
#define NVFENCE_EXPORT_H
/**
 * @file export.h
 * NVFENCE_API marks what libnvfence exports. The library is built with
 * -fvisibility=hidden and -fvisibility-inlines-hidden: a class, function or
 * C entry point is in its dynamic symbol table only when its declaration in
 * a public header (include/nvfence/) carries NVFENCE_API, so the exported
 * surface is exactly what these headers promise (the ABI that
 * abi/libnvfence.abi records and the abi_check test holds). The C and the
 * C++ symbols carry the version NVFENCE_1.0; nothing else is exported, not
 * even the std:: template instantiations used inside (src/capi/libnvfence.map).
 * C11 and C++20 alike.
 */
#if defined(__GNUC__) || defined(__clang__)
#define NVFENCE_API __attribute__((visibility("default")))
#else
#define NVFENCE_API
#endif
#endif /* NVFENCE_EXPORT_H */
