// Sockets the tests of `llmq serve` hold: the test's end of systemd's notify protocol
// (NOTIFY_SOCKET, an abstract AF_UNIX datagram socket: every datagram received, in order)
// and a loopback TCP port held in use (metrics.http_port); a plain HTTP client of that port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace llmq::testing {

// The test's end of NOTIFY_SOCKET: every datagram, in the order they came. The tests assert on
// that order and on counts, never on when a datagram came.
class NotifySocket {
 public:
  struct Message {
    std::string text;
  };

  NotifySocket() {
    name_ = "llmq-notify-test-" + std::to_string(getpid());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name_.data(), name_.size());  // abstract: sun_path[0] == 0
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name_.size();
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0;
    self_ = a;
    self_len_ = len;
    timeval tv{0, 50000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    reader_ = std::thread([this] {
      char buf[4096];
      while (!done_) {
        const ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) continue;
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back({std::string(buf, n)});
      }
    });
  }
  ~NotifySocket() {
    done_ = true;
    reader_.join();
    close(fd_);
  }

  bool bound() const { return bound_; }
  std::string address() const { return "@" + name_; }  // sd_notify's spelling of abstract
  std::vector<Message> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  // Index of the first message at or after `from` that contains `text`; -1 if none.
  int Find(const std::string& text, size_t from = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = from; i < messages_.size(); ++i)
      if (messages_[i].text.find(text) != std::string::npos) return static_cast<int>(i);
    return -1;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }
  int WaitFor(const std::string& text, size_t from, double seconds) {
    int i = -1;
    testing::WaitFor([&] { return (i = Find(text, from)) >= 0; }, seconds);
    return i;
  }
  // How many messages in [from, to) are exactly `text` (to: -1 for all).
  int Count(const std::string& text, size_t from, int to = -1) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t end = to < 0 ? messages_.size() : std::min<size_t>(to, messages_.size());
    int n = 0;
    for (size_t i = from; i < end; ++i) n += messages_[i].text == text;
    return n;
  }
  // Every datagram sent to the socket before this call has been received when it returns (a
  // datagram of its own is sent and waited for: the socket keeps their order). Its index.
  int Barrier() {
    const std::string mark = "TEST-BARRIER=" + std::to_string(++barriers_);
    sendto(fd_, mark.data(), mark.size(), 0, reinterpret_cast<const sockaddr*>(&self_), self_len_);
    return WaitFor(mark, 0, 30);
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
  sockaddr_un self_{};
  socklen_t self_len_ = 0;
  int barriers_ = 0;
  std::atomic<bool> done_{false};
  std::thread reader_;
  std::mutex mu_;
  std::vector<Message> messages_;
};

// A TCP port of 127.0.0.1 that a listening socket holds while this lives.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        listen(fd_, 1) == 0 && getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~HeldPort() {
    if (fd_ >= 0) close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }  // 0: none could be held

 private:
  int fd_ = -1;
  int port_ = 0;
};

// --- An HTTP client of llmq serve's metrics port (metrics.http_port): a plain socket.

// A TCP port free on 127.0.0.1 now (bound to port 0 and released: the daemon binds it next).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A connected socket to 127.0.0.1:port (reads time out after 15 s); -1 on failure.
inline int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{15, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything `fd` reads until the peer closes (or the read times out: then "<timeout>" ends it).
inline std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0) return out;
    if (n < 0) return out + "<timeout>";
    out.append(buf, n);
  }
}

// One HTTP exchange: sends `request` whole, returns the whole response.
inline std::string Http(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "<cannot connect>";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered (431) and closed before reading it all
    sent += n;
  }
  std::string r = ReadAll(fd);
  close(fd);
  return r;
}

inline std::string BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

}  // namespace llmq::testing
