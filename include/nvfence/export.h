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
 *
 * A class is marked NVFENCE_API as a whole only when it is polymorphic (its
 * vtable and typeinfo must be exported); its private member functions then
 * carry NVFENCE_LOCAL. Any other class exports its public member functions
 * one by one, so that no private member is in the ABI. The version script
 * lists every exported symbol by name (tests/abi/map_check.sh holds it).
 * C11 and C++20 alike.
 */
#if defined(__GNUC__) || defined(__clang__)
#define NVFENCE_API __attribute__((visibility("default")))
#define NVFENCE_LOCAL __attribute__((visibility("hidden")))
#else
#define NVFENCE_API
#define NVFENCE_LOCAL
#endif
#endif /* NVFENCE_EXPORT_H */
