// The daemon's log: one event a line on standard error ("llmq: <message>"), which systemd's
// journal keeps. The message is formatted printf-style, then made one safe line (OneLine,
// base/text.h): whatever an untrusted name held, it cannot split or forge a line. Thread-safe
// (one fprintf a line).
#pragma once

namespace llmq {

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace llmq
