// SPDX-License-Identifier: MIT
#include "json.hpp"

#include <cstdio>
#include <cstdlib>

namespace nvfence::cli {

namespace {
[[noreturn]] void misuse(const char* what) {
    std::fprintf(stderr, "nvfence: broken invariant in the JSON writer: %s\n", what);
    std::abort();
}
}  // namespace

nlohmann::ordered_json& Json::put(nlohmann::ordered_json v) {
    if (open_.empty()) {
        if (has_root_) misuse("a second top-level value");
        root_ = std::move(v);
        has_root_ = true;
        return root_;
    }
    nlohmann::ordered_json& top = *open_.back();
    if (top.is_object()) {
        if (!key_) misuse("a value inside an object without a member name");
        nlohmann::ordered_json& slot = top[*key_];
        key_.reset();
        slot = std::move(v);
        return slot;
    }
    if (key_) misuse("a member name inside an array");
    top.push_back(std::move(v));
    return top.back();
}

Json& Json::begin_object() {
    const bool outermost = open_.empty() && !has_root_;
    open_.push_back(&put(nlohmann::ordered_json::object()));
    if (outermost) key("schema_version").num(kJsonSchemaVersion);
    return *this;
}

Json& Json::begin_array() {
    open_.push_back(&put(nlohmann::ordered_json::array()));
    return *this;
}

Json& Json::close(bool object) {
    if (open_.empty() || open_.back()->is_object() != object || key_) misuse("closing what is not open");
    open_.pop_back();
    return *this;
}

Json& Json::end_object() { return close(true); }
Json& Json::end_array() { return close(false); }

Json& Json::key(std::string_view k) {
    if (open_.empty() || !open_.back()->is_object() || key_) misuse("a member name outside an object");
    key_ = std::string(k);
    return *this;
}

Json& Json::str(std::string_view v) {
    put(std::string(v));
    return *this;
}
Json& Json::num(uint64_t v) {
    put(v);
    return *this;
}
Json& Json::snum(int64_t v) {
    put(v);
    return *this;
}
Json& Json::boolean(bool v) {
    put(v);
    return *this;
}
Json& Json::null() {
    put(nullptr);
    return *this;
}

std::string Json::text() const {
    if (!open_.empty() || key_) misuse("text() of an unfinished document");
    // Device strings (model, serial) may hold any bytes: replaced, never thrown.
    return root_.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace nvfence::cli
