// SPDX-License-Identifier: MIT
#pragma once
// The SQLite VFS over the testing kit (nvfence/testing.hpp): each simulated
// host opens the shared simulated namespace under a path of its own,
// "/kit/hostN", so that one process holds the volumes of several hosts side
// by side, as separate machines would. Used by the VFS's failover unit test
// and by the failover benchmark (tests/sqlite/).
#include <sqlite3.h>
#include <string>
#include "nvfence/testing.hpp"
#include "sqlite/volume.hpp"

namespace nvfence::test {

/// Installs the kit as the VFS's backend for the lifetime of the object.
class KitSqlite {
public:
    explicit KitSqlite(testkit::SimCluster& c) : c_(c) {
        sqlite::Volume::set_backend_opener([this](const sqlite::OpenRequest& rq, sqlite::Backend& b, std::string& why) {
            return open_(rq, b, why);
        });
    }
    ~KitSqlite() { sqlite::Volume::set_backend_opener(nullptr); }
    KitSqlite(const KitSqlite&) = delete;
    KitSqlite& operator=(const KitSqlite&) = delete;

    /// The URI host @p i opens.
    static std::string uri(size_t i) { return "file:/kit/host" + std::to_string(i) + "?vfs=nvfence"; }

private:
    int open_(const sqlite::OpenRequest& rq, sqlite::Backend& b, std::string& why) {
        const std::string prefix = "/kit/host";
        if (rq.path.rfind(prefix, 0) != 0) {
            why = "not a kit path: " + rq.path;
            return SQLITE_CANTOPEN;
        }
        const size_t i = std::stoul(rq.path.substr(prefix.size()));
        if (i >= c_.size()) {
            why = "no such kit host: " + rq.path;
            return SQLITE_CANTOPEN;
        }
        testkit::SimHost& h = c_.host(i);
        b.port = &h.passthru();
        b.nsid = h.nsid();
        b.host = h.id();
        b.device = true;
        b.report_retry = std::chrono::milliseconds(0);  // simulated time: a real wait would change nothing
        b.make_writer = [&h](uint64_t epoch) { return h.open_writer(WriterOptions{.queue_depth = 8, .epoch = epoch}); };
        return SQLITE_OK;
    }
    testkit::SimCluster& c_;
};

}  // namespace nvfence::test
