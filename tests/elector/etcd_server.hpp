// SPDX-License-Identifier: MIT
#pragma once
// One real etcd-server (Debian's etcd 3.4) on 127.0.0.1 with free ports and
// a temporary data directory, for the etcd tests and the failover
// benchmark. NVFENCE_ETCD / NVFENCE_ETCDCTL name other binaries.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace nvfence::test {

inline std::string etcd_bin() {
    const char* e = std::getenv("NVFENCE_ETCD");
    return e ? e : "/usr/bin/etcd";
}
inline std::string etcdctl_bin() {
    const char* e = std::getenv("NVFENCE_ETCDCTL");
    return e ? e : "/usr/bin/etcdctl";
}

inline int free_port() {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        ::close(s);
        return -1;
    }
    ::close(s);
    return ntohs(a.sin_port);
}

// One etcd member on loopback; stop() and start() again keep the data.
class EtcdServer {
    using SteadyClock = std::chrono::steady_clock;
public:
    EtcdServer() {
        char tmpl[] = "/tmp/nvfence-etcd-XXXXXX";
        dir_ = ::mkdtemp(tmpl) ? tmpl : "";
        client_port_ = free_port();
        peer_port_ = free_port();
    }
    ~EtcdServer() {
        stop();
        std::error_code ec;
        if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    }
    std::string client_url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
    std::string data_dir() const { return dir_ + "/data"; }
    const std::string& dir() const { return dir_; }
    std::vector<std::string> extra_args;  ///< More etcd flags for the next start().

    // Starts etcd and waits (at most 15 s) until it answers.
    ::testing::AssertionResult start() {
        if (::access(etcd_bin().c_str(), X_OK) != 0)
            return ::testing::AssertionFailure()
                   << etcd_bin() << " not found: install Debian's etcd-server (scripts/setup.sh); "
                   << "the etcd tests never skip";
        const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
        std::vector<std::string> args = {etcd_bin(),
                                         "--name", "t",
                                         "--data-dir", data_dir(),
                                         "--listen-client-urls", client_url(),
                                         "--advertise-client-urls", client_url(),
                                         "--listen-peer-urls", peer,
                                         "--initial-advertise-peer-urls", peer,
                                         "--initial-cluster", "t=" + peer,
                                         "--logger", "zap"};
        args.insert(args.end(), extra_args.begin(), extra_args.end());
        pid_ = ::fork();
        if (pid_ == 0) {
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            if (!std::freopen((dir_ + "/etcd.out").c_str(), "a", stdout) ||
                !std::freopen((dir_ + "/etcd.out").c_str(), "a", stderr))
                ::_exit(127);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        const auto until = SteadyClock::now() + std::chrono::seconds(15);
        while (SteadyClock::now() < until) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                return ::testing::AssertionFailure() << "etcd exited at start; see " << dir_ << "/etcd.out";
            }
            if (ctl({"endpoint", "health"}, nullptr, 2) == 0) return ::testing::AssertionSuccess();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return ::testing::AssertionFailure() << "etcd did not answer in 15 s";
    }
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 100; ++i) {
            if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }
    // Runs etcdctl (API 3) against this member; its stdout in @p out.
    int ctl(const std::vector<std::string>& args, std::string* out, int timeout_s = 5) const {
        std::string cmd = "ETCDCTL_API=3 timeout " + std::to_string(timeout_s) + " " + etcdctl_bin() +
                          " --endpoints=" + client_url();
        for (const auto& a : args) cmd += " '" + a + "'";
        cmd += " 2>/dev/null";
        FILE* p = ::popen(cmd.c_str(), "r");
        if (!p) return -1;
        char buf[4096];
        size_t n;
        std::string o;
        while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.append(buf, n);
        const int rc = ::pclose(p);
        if (out) *out = o;
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

private:
    std::string dir_;
    int client_port_ = -1;
    int peer_port_ = -1;
    pid_t pid_ = -1;
};

}  // namespace nvfence::test
