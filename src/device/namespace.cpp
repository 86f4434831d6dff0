// SPDX-License-Identifier: MIT
#include "nvfence/namespace.hpp"

#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {
namespace {

std::string read_line(const std::string& path) {
    std::ifstream f(path);
    std::string s;
    if (f) std::getline(f, s);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string link_basename(const std::string& path) {
    char buf[PATH_MAX];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return {};
    std::string s(buf, static_cast<size_t>(n));
    auto slash = s.rfind('/');
    return slash == std::string::npos ? s : s.substr(slash + 1);
}

// Splits "<prefix><digits>[n<digits>]" kernel names; false when @p s is not
// exactly that shape. want_ns selects whether the "n<digits>" part must be
// there or must not.
bool split_name(std::string_view s, std::string_view prefix, bool want_ns, std::string& ctrl,
                std::string& ns) {
    if (s.substr(0, prefix.size()) != prefix) return false;
    s.remove_prefix(prefix.size());
    auto digits = [](std::string_view d) {
        return !d.empty() && d.size() <= 10 && d.find_first_not_of("0123456789") == std::string_view::npos;
    };
    const auto n = s.find('n');
    if (!want_ns) {
        if (!digits(s)) return false;
        ctrl = std::string(s);
        return true;
    }
    if (n == std::string_view::npos || !digits(s.substr(0, n)) || !digits(s.substr(n + 1))) return false;
    ctrl = std::string(s.substr(0, n));
    ns = std::string(s.substr(n + 1));
    return true;
}

bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

Result<NamespacePaths> resolve_namespace(std::string_view path) {
    const std::string p(path);
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return make_error_code(Errc::not_found);
        return errno_error(errno);
    }
    const bool blk = S_ISBLK(st.st_mode), chr = S_ISCHR(st.st_mode);
    if (!blk && !chr) return make_error_code(Errc::not_nvme);
    const std::string sys = std::string("/sys/dev/") + (blk ? "block/" : "char/") +
                            std::to_string(major(st.st_rdev)) + ":" +
                            std::to_string(minor(st.st_rdev));
    const std::string kname = link_basename(sys);
    // A node whose device the kernel no longer has: a namespace removed
    // under us (its /dev node outlives it for a moment), not a wrong path.
    if (kname.empty() && !exists(sys)) return make_error_code(Errc::device_gone);
    std::string c, n, unused;
    NamespacePaths out;
    if (blk && split_name(kname, "nvme", true, c, n)) {
        out.name = kname;
    } else if (chr && split_name(kname, "ng", true, c, n)) {
        out.name = "nvme" + c + "n" + n;
    } else if (chr && split_name(kname, "nvme", false, c, unused)) {
        return make_error_code(Errc::controller_node);
    } else {
        return make_error_code(Errc::not_nvme);
    }
    // Either branch above names the namespace nvme<C>n<N>; the generic
    // node's name below is cut from it.
    NVF_INVARIANT(out.name.size() > 4 && out.name.compare(0, 4, "nvme") == 0);
    NVF_INVARIANT(out.name.find('/') == std::string::npos);
    out.block = "/dev/" + out.name;
    // The block device's "device" link names its controller when native
    // multipath is off; with multipath it names the subsystem and the
    // namespace's first path is used instead.
    std::string ctrl = link_basename("/sys/block/" + out.name + "/device");
    if (!split_name(ctrl, "nvme", false, unused, unused)) ctrl = "nvme" + c;
    out.controller = ctrl;
    out.transport = read_line("/sys/class/nvme/" + ctrl + "/transport");
    const std::string ng = "/dev/ng" + out.name.substr(4);
    if (exists(ng)) out.generic = ng;
    return out;
}

bool NamespaceInfo::looks_shared() const {
    return ctrl.multi_controller || ns.shared || is_ebs_model(ctrl.model) ||
           (!paths.transport.empty() && paths.transport != "pcie");
}

Result<HostId> parse_host_id(std::string_view text) {
    HostId id{};
    size_t n = 0;
    for (char c : text) {
        if (c == '-') continue;
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else return make_error_code(Errc::invalid_argument);
        if (n >= 32) return make_error_code(Errc::invalid_argument);
        id[n / 2] = static_cast<uint8_t>(id[n / 2] | (v << ((n % 2) ? 0 : 4)));
        ++n;
    }
    if (n != 32) return make_error_code(Errc::invalid_argument);
    return id;
}

Result<HostId> read_host_id(Passthru& pt, const NamespacePaths& paths) {
    HostId id{};
    auto r = pt.submit(encode_get_host_id(), id);
    if (r && !host_id_is_zero(id)) return id;
    auto text = read_line("/sys/class/nvme/" + paths.controller + "/hostid");
    if (!text.empty()) {
        auto parsed = parse_host_id(text);
        if (parsed && !host_id_is_zero(*parsed)) return *parsed;
    }
    return make_error_code(Errc::host_id_unknown);
}

Result<std::unique_ptr<Namespace>> Namespace::open(std::string_view path, const OpenOptions& opts) {
    auto paths = resolve_namespace(path);
    if (!paths) return paths.error();
    Fd fd(::open(paths->block.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT || errno == ENXIO || errno == ENODEV)
            return make_error_code(Errc::device_gone);
        return errno_error(errno);
    }
    int nsid = ::ioctl(fd.get(), NVME_IOCTL_ID);
    if (nsid <= 0) {
        if (nsid < 0 && (errno == EACCES || errno == EPERM)) return errno_error(errno);
        return make_error_code(Errc::not_nvme);
    }
    NamespaceInfo info;
    info.paths = std::move(*paths);
    info.nsid = static_cast<uint32_t>(nsid);
    IoctlPassthru pt(fd.get());
    std::vector<uint8_t> buf(4096);
    Command id_ctrl = encode_identify(IdentifyCns::controller, 0);
    id_ctrl.timeout_ms = opts.timeout_ms;
    auto r = pt.submit(id_ctrl, buf);
    if (!r) return r.error();
    auto ctrl = parse_identify_controller(buf);
    if (!ctrl) return ctrl.error();
    info.ctrl = std::move(*ctrl);
    std::fill(buf.begin(), buf.end(), 0);
    Command id_ns = encode_identify(IdentifyCns::namespace_, info.nsid);
    id_ns.timeout_ms = opts.timeout_ms;
    r = pt.submit(id_ns, buf);
    if (!r) return r.error();
    auto ns = parse_identify_namespace(buf);
    if (!ns) return ns.error();
    info.ns = *ns;
    info.ebs_volume = ebs_volume_id(info.ctrl.serial);
    info.volume = volume_id(info.ctrl.serial, info.ns, info.nsid);
    if (opts.read_host_id) {
        if (auto h = read_host_id(pt, info.paths)) info.host_id = *h;
    }
    return std::unique_ptr<Namespace>(new Namespace(std::move(fd), std::move(info)));
}

Status Namespace::require_reservations(std::string* why) const {
    if (info_.reservations()) return Ok{};
    if (why) {
        if (is_ebs_model(info_.ctrl.model)) {
            *why = info_.paths.block +
                   ": this EBS volume reports no NVMe reservation support. AWS documents "
                   "reservations for Multi-Attach io2 volumes only (on by default for volumes "
                   "created after 2023-09-18; older io2 volumes after every instance detaches "
                   "and reattaches); io1 Multi-Attach volumes have none.";
        } else {
            *why = info_.paths.block + " (model \"" + info_.ctrl.model +
                   "\") has no NVMe reservation support: ONCS reservations bit " +
                   (info_.ctrl.reservations ? "set" : "clear") + ", RESCAP 0x" +
                   [&] {
                       char b[8];
                       std::snprintf(b, sizeof b, "%02x", info_.ns.rescap_raw);
                       return std::string(b);
                   }() +
                   ". nvfence cannot fence writes on it.";
        }
    }
    return make_error_code(Errc::no_reservations);
}

}  // namespace nvfence
