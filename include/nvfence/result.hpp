// SPDX-License-Identifier: MIT
#pragma once
/// @file result.hpp
/// A value or a std::error_code: the return type of every fallible call in
/// libnvfence. No exception crosses the public API.

#include <cassert>
#include <cstdlib>
#include <system_error>
#include <utility>
#include <variant>

#include "nvfence/export.h"

namespace nvfence {

/// Holds either a T or the std::error_code that explains why there is none.
/// Accessing the wrong alternative is a broken invariant and aborts.
template <class T>
class [[nodiscard]] Result {
public:
    /// A successful result holding @p v.
    Result(T v) : v_(std::move(v)) {}
    /// A failed result; @p ec must be non-zero.
    Result(std::error_code ec) : v_(ec) {
        if (!ec) std::abort();
    }
    /// True when a value is held.
    bool ok() const noexcept { return v_.index() == 0; }
    /// Same as ok().
    explicit operator bool() const noexcept { return ok(); }
    /// The value; aborts when the result holds an error.
    T& value() & { check_(true); return std::get<0>(v_); }
    /// The value; aborts when the result holds an error.
    const T& value() const& { check_(true); return std::get<0>(v_); }
    /// The value, moved out; aborts when the result holds an error.
    T&& value() && { check_(true); return std::get<0>(std::move(v_)); }
    /// Pointer-like access to the value.
    T* operator->() { return &value(); }
    /// Pointer-like access to the value.
    const T* operator->() const { return &value(); }
    /// The value.
    T& operator*() { return value(); }
    /// The value.
    const T& operator*() const { return value(); }
    /// The error; an empty error_code when ok().
    std::error_code error() const noexcept {
        return ok() ? std::error_code{} : std::get<1>(v_);
    }

private:
    void check_(bool want_value) const {
        if (ok() != want_value) std::abort();
    }
    std::variant<T, std::error_code> v_;
};

/// A Result with no value: success or an error_code.
struct NVFENCE_API Ok {};
/// Result of an operation that returns nothing but may fail.
using Status = Result<Ok>;

}  // namespace nvfence
