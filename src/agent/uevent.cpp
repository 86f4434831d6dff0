// SPDX-License-Identifier: MIT
#include "agent/uevent.hpp"

#include <linux/netlink.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {
namespace {

std::optional<uint32_t> parse_u32(std::string_view v) {
    int base = 10;
    if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        base = 16;
        v.remove_prefix(2);
    }
    if (v.empty() || v.size() > 10) return std::nullopt;
    uint64_t n = 0;
    for (char c : v) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0) return std::nullopt;
        n = n * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
        if (n > UINT32_MAX) return std::nullopt;
    }
    return static_cast<uint32_t>(n);
}

// A drain's counts: each datagram read is counted once, as malformed,
// matched or neither, and no more are read than asked for.
UeventDrain counted(const UeventDrain& d, uint32_t max_datagrams) {
    NVF_INVARIANT(d.datagrams <= max_datagrams && d.malformed + d.matched <= d.datagrams);
    return d;
}

std::optional<uint64_t> parse_u64_dec(std::string_view v) {
    if (v.empty() || v.size() > 19) return std::nullopt;
    uint64_t n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    return n;
}

}  // namespace

Result<Uevent> parse_uevent(std::span<const uint8_t> datagram) {
    const auto bad = make_error_code(Errc::malformed_data);
    if (datagram.empty() || datagram.size() > kMaxUeventBytes) return bad;
    const std::string_view all(reinterpret_cast<const char*>(datagram.data()), datagram.size());
    size_t pos = 0;
    auto next = [&]() -> std::string_view {
        const size_t before = pos;
        const size_t end = all.find('\0', pos);
        const size_t stop = end == std::string_view::npos ? all.size() : end;
        std::string_view s = all.substr(pos, stop - pos);
        pos = stop == all.size() ? all.size() : stop + 1;
        // Called only before the end: the cursor moves forward, never past
        // the datagram (the field loop ends).
        NVF_INVARIANT(before < all.size() && pos > before && pos <= all.size());
        return s;
    };
    const std::string_view header = next();
    // udev's own re-broadcast (group 2) starts with "libudev"; only the
    // kernel's format is accepted.
    if (header == "libudev") return bad;
    const size_t at = header.find('@');
    if (at == std::string_view::npos || at == 0 || at + 1 == header.size()) return bad;
    Uevent e;
    e.action = std::string(header.substr(0, at));
    e.devpath = std::string(header.substr(at + 1));
    while (pos < all.size()) {
        const std::string_view field = next();
        if (field.empty()) continue;
        const size_t eq = field.find('=');
        if (eq == std::string_view::npos || eq == 0) return bad;
        const std::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
        if (k == "ACTION") {
            if (v != e.action) return bad;
        } else if (k == "DEVPATH") {
            if (v != e.devpath) return bad;
        } else if (k == "SUBSYSTEM") {
            e.subsystem = std::string(v);
        } else if (k == "DEVNAME") {
            e.devname = std::string(v);
        } else if (k == "NVME_AEN") {
            e.nvme_aen = parse_u32(v);
        } else if (k == "SEQNUM") {
            e.seqnum = parse_u64_dec(v).value_or(0);
        }
    }
    return e;
}

AenInfo decode_aen(uint32_t dw0) {
    return {static_cast<uint8_t>(dw0 & 0x7u), static_cast<uint8_t>((dw0 >> 8) & 0xffu),
            static_cast<uint8_t>((dw0 >> 16) & 0xffu)};
}

bool is_aen_for(const Uevent& e, std::string_view controller) {
    if (!e.nvme_aen || e.subsystem != "nvme" || controller.empty()) return false;
    if (!e.devname.empty()) return e.devname == controller;
    const size_t slash = e.devpath.rfind('/');
    return std::string_view(e.devpath).substr(slash == std::string::npos ? 0 : slash + 1) == controller;
}

Result<UeventListener> UeventListener::open(uint32_t rcvbuf_bytes) {
    Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT));
    if (!fd) return std::error_code(errno, std::generic_category());
    const int size = static_cast<int>(rcvbuf_bytes);
    // Best effort: a smaller buffer only makes an overflow likelier, and an
    // overflow is handled as a possible event.
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = 1;  // the kernel's group; 2 is udev's re-broadcast
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return std::error_code(errno, std::generic_category());
    return UeventListener(std::move(fd));
}

Result<UeventDrain> UeventListener::drain(std::string_view controller, uint32_t max_datagrams) {
    UeventDrain d;
    std::array<uint8_t, kMaxUeventBytes + 1> buf;
    for (uint32_t i = 0; i < max_datagrams; ++i) {
        sockaddr_nl from{};
        iovec iov{buf.data(), buf.size()};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        const ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return counted(d, max_datagrams);
            if (errno == EINTR) continue;
            if (errno == ENOBUFS) {
                d.overflow = true;
                continue;
            }
            return std::error_code(errno, std::generic_category());
        }
        ++d.datagrams;
        if (from.nl_pid != 0 || (msg.msg_flags & MSG_TRUNC)) {
            ++d.malformed;
            continue;
        }
        auto e = parse_uevent(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
        if (!e) ++d.malformed;
        else if (is_aen_for(*e, controller)) ++d.matched;
    }
    d.more = true;
    return counted(d, max_datagrams);
}

}  // namespace nvfence
