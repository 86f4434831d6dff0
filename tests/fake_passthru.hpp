// SPDX-License-Identifier: MIT
#pragma once
/// @file fake_passthru.hpp
/// Test doubles for the device boundary (nvfence::Passthru): the testing
/// kit's reservation model (FakeTarget, HostPort: nvfence/testing_model.hpp,
/// compared with nvmet by the lab test vm_model_nvmet), a scripted
/// Passthru, and a temporary directory.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"

#include "nvfence/testing_model.hpp"

namespace nvfence::test {

// The reservation model is the testing kit's (nvfence/testing_model.hpp,
// installed for engines' own tests): one model, under the names the
// project's tests use.
using testkit::FakeTarget;
using testkit::get_le64;
using testkit::HostPort;
using testkit::make_host;
using testkit::nvme_err;
using testkit::NvmetDeviations;
using testkit::put_le16;
using testkit::put_le32;
using testkit::put_le64;
using testkit::Submission;

/// A scripted Passthru: records every command and answers each from a
/// queue of canned replies (data to copy in, and the result).
class ScriptedPassthru final : public Passthru {
public:
    struct Reply {
        std::vector<uint8_t> data;   ///< Copied to the start of the buffer.
        Result<uint32_t> result = uint32_t{0};
    };
    std::deque<Reply> replies;
    std::vector<Command> sent;

    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        sent.push_back(cmd);
        if (cmd.data_len > 0 && !cmd.host_to_device && data.size() < cmd.data_len) std::abort();
        if (replies.empty()) return nvme_err(NvmeStatus::internal_error);
        Reply r = std::move(replies.front());
        replies.pop_front();
        if (!cmd.host_to_device) {
            std::fill(data.begin(), data.end(), uint8_t{0});
            if (!r.data.empty() && !data.empty())
                std::memcpy(data.data(), r.data.data(), std::min(r.data.size(), data.size()));
        }
        return r.result;
    }
};

/// A temporary directory removed (with its files) at the end of the scope.
class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
        tmpl += "/nvfence-test-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!::mkdtemp(buf.data())) std::abort();
        path_ = buf.data();
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::string& path() const { return path_; }
    /// Writes @p text to @p name inside the directory.
    void write(const std::string& name, const std::string& text) const {
        const std::string p = path_ + "/" + name;
        const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) std::abort();
        if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
        ::close(fd);
    }

private:
    std::string path_;
};

}  // namespace nvfence::test
