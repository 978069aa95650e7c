// The llmq subcommands. Each returns the process exit status: 0 success, 1 failure (a clear
// message on stderr), 2 bad command line.
#pragma once

namespace llmq::cli {

int Generate(int argc, char** argv);   // llmq generate --model DIR --prompt TEXT ...
int Plan(int argc, char** argv);       // llmq plan --model DIR [--memory BYTES]
int MakeModel(int argc, char** argv);  // llmq make-model --shape NAME|--config FILE --out DIR
int Run(int argc, char** argv);        // llmq run IN.jsonl -o OUT.jsonl --model DIR ...

}  // namespace llmq::cli
