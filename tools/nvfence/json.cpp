// SPDX-License-Identifier: MIT
#include "json.hpp"

#include <cstdio>
#include <cstdlib>

namespace nvfence::cli {

std::string json_escape(std::string_view s) {
    std::string o;
    for (unsigned char c : s) {
        switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        default:
            if (c < 0x20) {
                char b[8];
                std::snprintf(b, sizeof b, "\\u%04x", c);
                o += b;
            } else {
                o.push_back(static_cast<char>(c));
            }
        }
    }
    return o;
}

void Json::value_prefix() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!first_.empty()) {
        if (!first_.back()) out_ += ',';
        first_.back() = false;
    }
}

Json& Json::begin_object() {
    const bool outermost = first_.empty() && out_.empty();
    value_prefix();
    out_ += '{';
    first_.push_back(true);
    if (outermost) key("schema_version").num(kJsonSchemaVersion);
    return *this;
}
Json& Json::end_object() {
    if (first_.empty()) std::abort();
    first_.pop_back();
    out_ += '}';
    return *this;
}
Json& Json::begin_array() {
    value_prefix();
    out_ += '[';
    first_.push_back(true);
    return *this;
}
Json& Json::end_array() {
    if (first_.empty()) std::abort();
    first_.pop_back();
    out_ += ']';
    return *this;
}
Json& Json::key(std::string_view k) {
    value_prefix();
    out_ += '"';
    out_ += json_escape(k);
    out_ += "\":";
    after_key_ = true;
    return *this;
}
Json& Json::str(std::string_view v) {
    value_prefix();
    out_ += '"';
    out_ += json_escape(v);
    out_ += '"';
    return *this;
}
Json& Json::num(uint64_t v) {
    value_prefix();
    out_ += std::to_string(v);
    return *this;
}
Json& Json::snum(int64_t v) {
    value_prefix();
    out_ += std::to_string(v);
    return *this;
}
Json& Json::boolean(bool v) {
    value_prefix();
    out_ += v ? "true" : "false";
    return *this;
}
Json& Json::null() {
    value_prefix();
    out_ += "null";
    return *this;
}

}  // namespace nvfence::cli
