// SPDX-License-Identifier: MIT
// FencedWriter inside an epoll loop: the writer's event_fd() beside a
// timerfd in one epoll set. The loop keeps up to kDepth writes in flight,
// reaps on the writer's readiness (min_complete 0, until the batch comes
// back short) and uses the timer as a watchdog. A fenced completion ends
// the loop the way an engine would stop: wait until settled(), then exit 3.
//
//   nvfence-epoll-example PATH [WRITES]
//
// PATH: a namespace block device, or a regular file on a file system with
// O_DIRECT (made 1 MiB long if shorter). Exit 0 when every write completed
// ok and reads back, 3 when fenced, 1 on any other failure.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nvfence/error.hpp>
#include <nvfence/writer.hpp>

namespace {

constexpr uint32_t kDepth = 8;
constexpr uint64_t kFileBytes = 1 << 20;
constexpr int kWatchdogTicks = 10;  // seconds without progress before giving up

int fail(const char* what, const std::error_code& ec) {
    std::fprintf(stderr, "epoll example: %s: %s\n", what, ec.message().c_str());
    return 1;
}

// A regular file shorter than kFileBytes is extended; a device is left as is.
bool prepare(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    const bool ok = (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(kFileBytes)) ||
                    ::ftruncate(fd, static_cast<off_t>(kFileBytes)) == 0;
    ::close(fd);
    return ok;
}

struct Loop {
    Loop(nvfence::FencedWriter& writer, uint64_t n) : w(writer), writes(n) {
        for (uint32_t i = 0; i < kDepth; ++i) {
            bufs.emplace_back(w.block_bytes(), w.block_bytes());
            free_slots.push_back(i);
        }
    }
    nvfence::FencedWriter& w;
    uint64_t writes;
    std::vector<nvfence::AlignedBuffer> bufs;  // one per queue slot
    std::vector<uint32_t> free_slots;
    uint64_t next = 0, done = 0;
    bool fenced = false;

    // Fills the queue, then one submit for the batch.
    int refill() {
        bool queued = false;
        while (!fenced && next < writes && !free_slots.empty()) {
            const uint32_t slot = free_slots.back();
            auto& b = bufs[slot];
            std::memset(b.data(), static_cast<int>('a' + next % 26), b.size());
            const uint64_t lba = next % w.size_blocks();
            if (auto st = w.queue_write(lba, b.span(), (next << 8) | slot); !st) return fail("queue_write", st.error());
            free_slots.pop_back();
            ++next;
            queued = true;
        }
        if (queued)
            if (auto r = w.submit(); !r && r.error() != nvfence::Errc::fenced) return fail("submit", r.error());
        return 0;
    }

    // On readiness: reap what is ready, never blocking, until a short batch.
    int drain() {
        nvfence::Completion out[kDepth];
        for (;;) {
            auto n = w.reap(out, 0);
            if (!n) return fail("reap", n.error());
            for (size_t i = 0; i < *n; ++i) {
                free_slots.push_back(static_cast<uint32_t>(out[i].user_data & 0xff));
                if (out[i].status == nvfence::IoStatus::fenced) fenced = true;
                else if (out[i].status != nvfence::IoStatus::ok) return fail("write", out[i].error);
                else ++done;
            }
            if (*n < std::size(out)) return 0;
        }
    }
};

int run(nvfence::FencedWriter& w, uint64_t writes) {
    auto efd = w.event_fd();
    if (!efd) return fail("event_fd", efd.error());
    int ep = ::epoll_create1(EPOLL_CLOEXEC);
    int tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || tfd < 0) return fail("epoll/timerfd", {errno, std::system_category()});
    itimerspec tick{{1, 0}, {1, 0}};
    ::timerfd_settime(tfd, 0, &tick, nullptr);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = *efd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, *efd, &ev);
    ev.data.fd = tfd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);

    Loop l(w, writes);
    int rc = l.refill();
    int idle_ticks = 0;
    uint64_t wakeups = 0;
    while (rc == 0 && w.in_flight() > 0) {
        epoll_event got[2];
        const int n = ::epoll_wait(ep, got, 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = fail("epoll_wait", {errno, std::system_category()});
        for (int i = 0; rc == 0 && i < n; ++i) {
            if (got[i].data.fd == tfd) {
                uint64_t expirations = 0;
                if (::read(tfd, &expirations, sizeof expirations) > 0 && ++idle_ticks >= kWatchdogTicks)
                    rc = fail("watchdog", std::make_error_code(std::errc::timed_out));
                continue;
            }
            ++wakeups;
            idle_ticks = 0;
            rc = l.drain();
            if (rc == 0) rc = l.refill();
        }
    }
    ::close(tfd);
    ::close(ep);
    if (rc != 0) return rc;
    if (l.fenced) {
        // Fenced: nothing more of ours is sent; settled() once every write
        // the kernel had taken has come back (the loop above reaped them).
        std::printf("fenced after %llu writes; settled=%d\n", static_cast<unsigned long long>(l.done), w.settled());
        return 3;
    }
    std::printf("wrote %llu blocks in %llu wakeups\n", static_cast<unsigned long long>(l.done),
                static_cast<unsigned long long>(wakeups));
    return l.done == writes ? 0 : 1;
}

// The last write of each block is what the media holds.
int check(nvfence::FencedWriter& w, uint64_t writes) {
    nvfence::AlignedBuffer b(w.block_bytes(), w.block_bytes());
    for (uint64_t lba = 0; lba < std::min<uint64_t>(writes, w.size_blocks()); ++lba) {
        uint64_t last = lba;
        while (last + w.size_blocks() < writes) last += w.size_blocks();
        auto c = w.read(lba, b.span());
        if (c.status != nvfence::IoStatus::ok) return fail("read", c.error);
        if (b.data()[0] != static_cast<uint8_t>('a' + last % 26)) {
            std::fprintf(stderr, "epoll example: block %llu does not hold write %llu\n",
                         static_cast<unsigned long long>(lba), static_cast<unsigned long long>(last));
            return 1;
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: %s PATH [WRITES]\n", argv[0]);
        return 2;
    }
    const std::string path = argv[1];
    const uint64_t writes = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : 1000;
    if (!prepare(path)) return fail(path.c_str(), {errno, std::system_category()});
    nvfence::WriterOptions o;
    o.allow_regular_file = true;
    o.queue_depth = kDepth;
    o.timeout_ms = 10000;
    auto w = nvfence::FencedWriter::open(path, o);
    if (!w) return fail(path.c_str(), w.error());
    if (int rc = run(**w, writes); rc != 0) return rc;
    return check(**w, writes);
}
