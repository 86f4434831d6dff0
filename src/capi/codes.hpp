// SPDX-License-Identifier: MIT
#pragma once
/// @file codes.hpp
/// The C API's one mapping between std::error_code and its int codes
/// (nvfence/nvfence.h "Errors"): nvfence's own errors negated, NVMe status
/// codes above NVF_ERR_NVME_BASE, errnos above NVF_ERR_ERRNO_BASE. Inline,
/// so the unit tests check the mapping itself (capi_codes_test.cpp).

#include <climits>
#include <system_error>

#include "nvfence/error.hpp"
#include "nvfence/nvfence.h"

namespace nvfence::capi {

/// nvfence's own codes are 1..kOwnMax.
inline constexpr int kOwnMax = 99;
/// Every Errc has its C name: the last one is the last of nvf_errc's own.
inline constexpr int kLastErrc = NVF_ERRC_VIEW_LOST;

/// The C code of @p ec (0 for none).
inline int to_code(std::error_code ec) noexcept {
    if (!ec) return NVF_OK;
    const int v = ec.value();
    if (ec.category() == nvfence_category() && v > 0 && v <= kOwnMax) return -v;
    if (ec.category() == nvme_category() && v > 0 && v <= kStatusMask) return -(NVF_ERR_NVME_BASE + v);
    if ((ec.category() == std::system_category() || ec.category() == std::generic_category()) && v > 0 &&
        v < NVF_ERR_ERRNO_BASE)
        return -(NVF_ERR_ERRNO_BASE + v);
    // A state-directory call's errno: the state directory could not be used.
    if (is_state_error(ec)) return -NVF_ERRC_STATE_IO;
    return -NVF_ERRC_INTERNAL;
}

/// The error_code an int stands for; empty for 0, for positive counts, for
/// INT_MIN and any other code outside the three ranges, and for the C API's
/// own codes (nomem, internal, truncated), which have no C++ counterpart.
inline std::error_code from_code(int code) noexcept {
    if (code >= 0 || code == INT_MIN) return {};
    const int v = -code;
    if (v <= kLastErrc) return make_error_code(static_cast<Errc>(v));
    if (v > NVF_ERR_NVME_BASE && v <= NVF_ERR_NVME_BASE + kStatusMask)
        return make_nvme_error(static_cast<uint16_t>(v - NVF_ERR_NVME_BASE));
    if (v > NVF_ERR_ERRNO_BASE && v < 2 * NVF_ERR_ERRNO_BASE) return errno_error(v - NVF_ERR_ERRNO_BASE);
    return {};
}

}  // namespace nvfence::capi
