// SPDX-License-Identifier: MIT
// An engine's failover unit test on the nvfence testing kit: no lab, no
// shared namespace. The "engine" appends blocks through a FencedWriter;
// the test fails over to another host while a write is still on its way
// and checks that the device, not the engine, decided what landed.
#include <nvfence/testing.hpp>

#include <cstdio>
#include <cstring>

using namespace nvfence;

struct Engine {  // the engine under test: an append-only log of blocks
    std::unique_ptr<FencedWriter> w;
    uint64_t next = 0;
    IoStatus append(char c) {
        AlignedBuffer b(w->block_bytes(), w->block_bytes());
        std::memset(b.data(), c, b.size());
        const Completion r = w->write(next, b.span());
        if (r.status == IoStatus::ok) ++next;
        return r.status;
    }
};

#define CHECK(c) if (!(c)) { std::fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); return 1; }

int main() {
    testkit::SimCluster c({.hosts = 2});
    CHECK(c.host(0).takeover());                       // host 0 leads
    Engine e{std::move(*c.host(0).open_writer({}))};
    CHECK(e.append('a') == IoStatus::ok);
    // The next write waits 5 ms on its way to the device; meanwhile host 1
    // takes over (the old leader was paused: its write reaches the device late).
    c.plan = [](const testkit::SimIo&) { return testkit::IoPlan{.start_us = 5000}; };
    AlignedBuffer late(4096);
    CHECK(e.w->queue_write(1, late.span(), 7) && e.w->submit());
    CHECK(c.host(1).takeover());
    Completion done;
    CHECK(e.w->reap({&done, 1}, 1) && done.status == IoStatus::fenced);
    CHECK(e.w->settled());                             // nothing more of host 0 can land
    CHECK(e.append('b') == IoStatus::fenced);          // latched: not even sent
    CHECK(c.block(0)[0] == 'a' && c.block(1)[0] == 0); // the device kept only the grant's write
    std::puts("failover test passed");
    return 0;
}
