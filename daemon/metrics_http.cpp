#include "daemon/metrics_http.h"

// <utility> first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it.
#include <utility>

#include <boost/asio.hpp>

#include <array>
#include <cctype>
#include <string_view>

namespace llmq {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::string Response(const char* status, const std::string& extra_headers,
                     const std::string& content_type, std::string_view body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers +
         "Connection: close\r\n\r\n" + std::string(body);
}

std::string Error(const char* status, const std::string& extra_headers = "",
                  const std::string& why = "") {
  return Response(status, extra_headers, "text/plain; charset=utf-8",
                  std::string(status) + "\n" + (why.empty() ? "" : why + "\n"));
}

// An HTML page that may reach nothing but this port: its own inline style, and (`script`) its
// inline script fetching from here.
std::string Page(std::string_view html, bool script) {
  const std::string policy =
      std::string("Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'") +
      (script ? "; script-src 'unsafe-inline'; connect-src 'self'" : "") +
      "\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";
  return Response("200 OK", policy, "text/html; charset=utf-8", html);
}

// A job's public id ("batch_" and hex digits): letters, digits, '_', at most 64.
bool IsJobId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

}  // namespace

// One client: reads its request (bounded in size and time), writes the answer, closes.
class MetricsHttp::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(MetricsHttp* server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), deadline_(socket_.get_executor()) {}

  void Start() {
    deadline_.expires_after(server_->options_.timeout);
    deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Close();  // too slow: sent or read too little in time
    });
    Read();
  }

  void Close() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    deadline_.cancel();
    server_->connections_.erase(shared_from_this());
  }

 private:
  void Read() {
    socket_.async_read_some(asio::buffer(chunk_),
                            [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                              self->OnRead(ec, n);
                            });
  }

  void OnRead(boost::system::error_code ec, size_t n) {
    if (ec) {  // the client went away, or Close / Stop closed the socket
      if (ec != asio::error::operation_aborted) Close();
      return;
    }
    request_.append(chunk_.data(), n);
    size_t end = request_.find("\r\n\r\n");
    if (end == std::string::npos) end = request_.find("\n\n");
    if (end != std::string::npos && end < server_->options_.max_request_bytes) {
      Write(server_->Respond(request_.substr(0, end)));
    } else if (request_.size() >= server_->options_.max_request_bytes) {
      Write(Error("431 Request Header Fields Too Large"));
    } else {
      Read();
    }
  }

  void Write(std::string response) {
    response_ = std::move(response);
    asio::async_write(socket_, asio::buffer(response_),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (ec != asio::error::operation_aborted) self->Close();
                      });
  }

  MetricsHttp* server_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  std::array<char, 1024> chunk_{};
  std::string request_, response_;
};

MetricsHttp::MetricsHttp(asio::io_context& io, Options options)
    : options_(options), acceptor_(io), retry_timer_(io) {}

MetricsHttp::~MetricsHttp() {
  Stop();
}

Status MetricsHttp::Start() {
  const tcp::endpoint at(asio::ip::make_address_v4("127.0.0.1"),
                         static_cast<uint16_t>(options_.port));
  boost::system::error_code ec;
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return Status::IoError("metrics.http_port: cannot listen on 127.0.0.1:" +
                           std::to_string(options_.port) + ": " + ec.message());
  }
  Accept();
  return Status::Ok();
}

void MetricsHttp::SetBody(std::string text) {
  body_ = std::make_shared<const std::string>(std::move(text));
}

void MetricsHttp::SetStatusPage(std::string html) {
  status_page_ = std::make_shared<const std::string>(std::move(html));
}

void MetricsHttp::SetReportReader(ReportReader reader) {
  report_reader_ = std::move(reader);
}

void MetricsHttp::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  const auto open = connections_;  // Close erases from connections_
  for (const std::shared_ptr<Connection>& c : open) c->Close();
}

void MetricsHttp::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {  // out of file descriptors, say: try again a little later instead of spinning
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([this](boost::system::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (connections_.size() < options_.max_connections) {
      auto c = std::make_shared<Connection>(this, std::move(socket));
      connections_.insert(c);
      c->Start();
    }  // else `socket` closes here
    Accept();
  });
}

std::string MetricsHttp::Respond(const std::string& request) const {
  // The request line: METHOD SP TARGET SP HTTP/1.x
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1);
  const auto version = [&](const char* v) {
    return sp2 != std::string::npos && line.compare(sp2 + 1, std::string::npos, v) == 0;
  };
  if (sp1 == std::string::npos || !(version("HTTP/1.0") || version("HTTP/1.1")))
    return Error("400 Bad Request");
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));  // a query string is ignored
  constexpr std::string_view kReports = "/reports/";
  const bool report = target.starts_with(kReports) && report_reader_ != nullptr &&
                      IsJobId(std::string_view(target).substr(kReports.size()));
  if (target != "/metrics" && target != "/" && !report) return Error("404 Not Found");
  if (method != "GET") return Error("405 Method Not Allowed", "Allow: GET\r\n");
  if (target == "/metrics")
    return Response("200 OK", "", "text/plain; version=0.0.4; charset=utf-8",
                    body_ != nullptr ? std::string_view(*body_) : std::string_view());
  if (target == "/") {
    if (status_page_ == nullptr)
      return Error("503 Service Unavailable", "Retry-After: 1\r\n", "the status page is not ready");
    return Page(*status_page_, /*script=*/true);
  }
  std::string html;
  const Status st = report_reader_(target.substr(kReports.size()), &html);
  if (st.code() == Status::Code::kNotFound) return Error("404 Not Found", "", st.message());
  if (!st.ok()) return Error("500 Internal Server Error", "", st.message());
  return Page(html, /*script=*/false);
}

}  // namespace llmq
