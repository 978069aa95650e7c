// MetricsHttp: the daemon's metrics over HTTP, for Prometheus to scrape (metrics.http_port; off by
// default). `GET /metrics` on 127.0.0.1:PORT answers the exposition the metrics textfile holds:
// the text RenderMetrics last produced (llmq serve hands each one to both, see SetBody), so the two
// never disagree and a scrape never touches the queue. `GET /` answers the status page
// (daemon/status_page.h), rendered with the metrics (SetStatusPage); `GET /reports/<job id>` a
// finished job's report, as the ReportReader given reads it (a job id is letters, digits and '_',
// anything else is 404 before the reader is asked). Pages are sent with a Content-Security-Policy
// that lets them reach nothing but this port.
//
// It runs on the daemon's io_context and never blocks it: every read and write is asynchronous.
// A request is its request line and headers, at most Options::max_request_bytes (else 431); a
// connection that has not sent a whole request and received its answer within Options::timeout is
// closed (a client that sends nothing, or reads nothing, costs a socket until then); at most
// Options::max_connections at once (more are closed at once). One request per connection
// (`Connection: close`). Other paths are 404, other methods on /metrics 405 (`Allow: GET`), a
// request that is not HTTP/1.x 400.
#pragma once

// <utility> first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it.
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "base/status.h"

namespace llmq {

class MetricsHttp {
 public:
  struct Options {
    int port = 0;  // 1..65535
    std::chrono::milliseconds timeout{5000};
    size_t max_request_bytes = 8192;
    size_t max_connections = 16;
  };
  MetricsHttp(boost::asio::io_context& io, Options options);
  ~MetricsHttp();

  // Binds 127.0.0.1:port and starts accepting. IoError naming the address and the reason (the
  // port in use, ...).
  Status Start();
  // The exposition answered from now on (event-loop thread).
  void SetBody(std::string text);
  // The status page's HTML answered from now on (event-loop thread); 503 until the first.
  void SetStatusPage(std::string html);
  // Reads the report of the job with public id `job_id` into *html: NotFound (404, its message
  // the body) when there is none, another error 500. Called on the event loop.
  using ReportReader = std::function<Status(const std::string& job_id, std::string* html)>;
  void SetReportReader(ReportReader reader);
  // Closes the listening socket and every connection.
  void Stop();

 private:
  class Connection;
  void Accept();
  // The whole response to `request` (its line and headers).
  std::string Respond(const std::string& request) const;

  Options options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;  // an accept that failed (EMFILE) is tried again later
  std::shared_ptr<const std::string> body_, status_page_;
  ReportReader report_reader_;
  std::set<std::shared_ptr<Connection>> connections_;
};

}  // namespace llmq
