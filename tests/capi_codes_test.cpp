// SPDX-License-Identifier: MIT
// The C API's mapping between std::error_code and its int codes
// (src/capi/codes.hpp): every range, the codes outside them, INT_MIN, and
// the state directory's errors.
#include <gtest/gtest.h>

#include <cerrno>
#include <climits>

#include "capi/codes.hpp"
#include "nvfence/error.hpp"
#include "nvfence/nvfence.h"

namespace nvfence {
namespace {

TEST(CapiCodes, EveryRangeRoundTrips) {
    EXPECT_EQ(capi::to_code({}), NVF_OK);
    for (int v = 1; v <= capi::kLastErrc; ++v) {
        const auto ec = make_error_code(static_cast<Errc>(v));
        EXPECT_EQ(capi::to_code(ec), -v);
        EXPECT_EQ(capi::from_code(-v), ec);
    }
    const auto nvme = make_nvme_error(0x83);
    EXPECT_EQ(capi::to_code(nvme), NVF_ERR_RESERVATION_CONFLICT);
    EXPECT_EQ(capi::from_code(NVF_ERR_RESERVATION_CONFLICT), nvme);
    EXPECT_EQ(capi::to_code(errno_error(ENOENT)), -(NVF_ERR_ERRNO_BASE + ENOENT));
    EXPECT_EQ(capi::from_code(-(NVF_ERR_ERRNO_BASE + ENOENT)), errno_error(ENOENT));
}

// INT_MIN has no negation in int: it is a code outside every range, not
// undefined behaviour (the C API's nvf_strerror, nvf_is_fenced and
// nvf_exit_code all start here).
TEST(CapiCodes, CodesOutsideTheRangesMeanNothing) {
    for (int code : {INT_MIN, INT_MIN + 1, -(2 * NVF_ERR_ERRNO_BASE), -12345678, -(NVF_ERR_NVME_BASE), 0, 1, INT_MAX})
        EXPECT_FALSE(capi::from_code(code)) << code;
}

// A state directory that cannot be used (an errno of a state-directory
// call, state_category()) is NVF_ERRC_STATE_IO, not "internal".
TEST(CapiCodes, StateDirectoryErrorsAreStateIo) {
    EXPECT_EQ(capi::to_code(state_error(ENOSPC)), -NVF_ERRC_STATE_IO);
    EXPECT_EQ(capi::to_code(state_error(EACCES)), -NVF_ERRC_STATE_IO);
    EXPECT_EQ(capi::to_code(make_error_code(Errc::unsafe_state_dir)), -NVF_ERRC_UNSAFE_STATE_DIR);
}

}  // namespace
}  // namespace nvfence
