// Structured outputs in the engine (issue 24): requests with a grammar are drawn under their
// masks (engine/core/grammar_masks.h) on a shared family model (random weights: the walk through
// the grammar is a fuzz test), beside unconstrained ones. Checked: every finished document is
// complete JSON of the schema's shape, every cut one a prefix the grammar accepts; a constrained
// request gives the same ids alone and in a batch (batch invariance); unconstrained neighbours
// are not changed by constrained ones; n > 1 samples each follow the grammar.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/text.h"
#include "engine/core/grammar_masks.h"
#include "engine/core/llm_engine.h"
#include "engine/model/model.h"
#include "engine/structured/gbnf.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher.h"
#include "engine/structured/token_trie.h"
#include "kernels/cpu/ops.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

using json = nlohmann::ordered_json;

class StructuredEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::SharedModel("tiny-qwen3");
    LLMQ_SKIP_WITHOUT_SHARED(dir_, "tiny-qwen3");
    ASSERT_TRUE(LoadModel(dir_, BackendChoice{}, &model_).ok());
    trie_ = std::make_shared<const TokenTrie>(TokenTrie::FromTokenizer(*model_.tokenizer));
  }
  std::shared_ptr<CompiledGrammar> Compile(const json& schema) {
    Grammar g;
    EXPECT_TRUE(CompileJsonSchema(schema, &g).ok()) << schema.dump();
    std::shared_ptr<CompiledGrammar> c;
    EXPECT_TRUE(CompiledGrammar::Compile(std::move(g), trie_, &c).ok());
    return c;
  }
  std::unique_ptr<LlmEngine> Engine() {
    EngineOptions opt;
    opt.num_blocks = 512;
    std::unique_ptr<LlmEngine> e;
    EXPECT_TRUE(
        LlmEngine::Create(model_.cfg, model_.backend.get(), model_.tokenizer.get(), opt, &e).ok());
    return e;
  }
  std::map<std::string, RequestOutput> Run(LlmEngine* e, const std::vector<Request>& reqs) {
    for (const Request& r : reqs) e->Add(r);
    std::vector<RequestOutput> done;
    while (e->HasWork()) {
      EXPECT_TRUE(e->Step(&done).ok());
      EXPECT_TRUE(e->CheckInvariants().ok());
    }
    std::map<std::string, RequestOutput> by_id;
    for (RequestOutput& o : done) by_id[o.id] = std::move(o);
    return by_id;
  }
  Request Req(const std::string& id, std::shared_ptr<CompiledGrammar> g, float temperature,
              uint64_t seed, int max_tokens = 96) {
    Request r;
    r.id = id;
    r.prompt_ids = model_.tokenizer->Encode("Return the record as JSON: " + id);
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.max_tokens = max_tokens;
    r.grammar = std::move(g);
    return r;
  }

  std::string dir_;
  Model model_;
  std::shared_ptr<const TokenTrie> trie_;
};

// The text a fresh matcher accepts whole; with `complete`, also as a whole document.
::testing::AssertionResult Follows(const std::shared_ptr<CompiledGrammar>& g,
                                   const std::string& text, bool complete) {
  Matcher m(g);
  if (!m.Consume(text)) return ::testing::AssertionFailure() << "refused: " << text;
  if (complete && !m.CanEnd()) return ::testing::AssertionFailure() << "incomplete: " << text;
  return ::testing::AssertionSuccess();
}

const json kRecord = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"enum": ["a", "bc", "def"]}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "tags", "ok"],
  "additionalProperties": false
})");

// The step's masks over a vocabulary of the 256 bytes, EOS 257 and one more token (259 logits):
// a constrained row allows what its matcher accepts and EOS where the document may end, one token
// alone is forced; an unconstrained row allows every token and no bit past the vocabulary.
TEST(GrammarMasks, RowsForcedTokensAndEos) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(json{{"const", "ab"}}, &g).ok());
  std::shared_ptr<CompiledGrammar> c;
  ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
  constexpr int kVocab = 259, kEos = 257;
  Sequence fresh, done, free;
  fresh.matcher = std::make_unique<Matcher>(c);
  done.matcher = std::make_unique<Matcher>(c);
  ASSERT_TRUE(done.matcher->Consume("\"ab\""));
  const std::vector<Sequence*> rows = {&fresh, &done, &free};
  GrammarMasks masks(kVocab, {kEos});
  ASSERT_TRUE(masks.Prepare(rows));
  EXPECT_FALSE(masks.computed());
  const uint32_t* w = masks.Compute();
  ASSERT_TRUE(masks.computed());
  const int W = masks.words_per_row();
  ASSERT_EQ(W, 9);
  auto allowed = [&](int row) {
    std::vector<int> ids;
    for (int t = 0; t < W * 32; ++t)
      if ((w[row * W + t / 32] >> (t % 32)) & 1u) ids.push_back(t);
    return ids;
  };
  EXPECT_EQ(allowed(0), std::vector<int>{'"'});
  EXPECT_EQ(masks.forced(0), '"');
  EXPECT_EQ(allowed(1), std::vector<int>{kEos});  // complete: EOS alone
  EXPECT_EQ(masks.forced(1), kEos);
  EXPECT_EQ(allowed(2).size(), static_cast<size_t>(kVocab));
  EXPECT_EQ(masks.forced(2), -1);
  EXPECT_EQ(masks.mask_times().count(), 2);
  // Applied to logits (the CPU reference of the device kernel): masked tokens become -inf.
  std::vector<float> logits(3 * kVocab, 1.5f);
  kernels::ApplyTokenBitmask(logits.data(), 3, kVocab, w, W);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < kVocab; ++t) {
      const bool on = (w[r * W + t / 32] >> (t % 32)) & 1u;
      EXPECT_EQ(logits[r * kVocab + t], on ? 1.5f : -std::numeric_limits<float>::infinity())
          << r << " " << t;
    }
  EXPECT_FALSE(masks.Prepare({&free}));
}

// Where the trie's vocabulary is the model's, a row whose document cannot end yet is its matcher's
// kept mask, read in place (no copy); a row that may end is a copy with the EOS ids added. The
// packed rows (Compute: the device's) are the same words.
TEST(GrammarMasks, KeptMasksAreReadInPlace) {
  Grammar g;
  ASSERT_TRUE(CompileJsonSchema(json{{"const", "ab"}}, &g).ok());
  std::shared_ptr<CompiledGrammar> c;
  ASSERT_TRUE(CompiledGrammar::Compile(std::move(g), TokenTrie::SingleBytes(), &c).ok());
  constexpr int kVocab = 256, kEos = 255;  // byte 255 is in no UTF-8 text: only ever EOS
  Sequence fresh, mid, done, free;
  fresh.matcher = std::make_unique<Matcher>(c);
  mid.matcher = std::make_unique<Matcher>(c);
  ASSERT_TRUE(mid.matcher->Consume("\"a"));
  done.matcher = std::make_unique<Matcher>(c);
  ASSERT_TRUE(done.matcher->Consume("\"ab\""));
  const std::vector<Sequence*> rows = {&free, &fresh, &mid, &done};
  GrammarMasks masks(kVocab, {kEos});
  ASSERT_TRUE(masks.Prepare(rows));
  masks.ComputeRows();
  EXPECT_FALSE(masks.computed()) << "nothing packed for the host";
  EXPECT_EQ(masks.row(0), nullptr);
  EXPECT_EQ(masks.row(1), fresh.matcher->Mask().words().data());
  EXPECT_EQ(masks.row(2), mid.matcher->Mask().words().data());
  EXPECT_NE(masks.row(3), done.matcher->Mask().words().data());
  EXPECT_EQ(masks.forced(0), -1);
  EXPECT_EQ(masks.forced(1), '"');
  EXPECT_EQ(masks.forced(2), 'b');
  EXPECT_EQ(masks.forced(3), kEos);
  const int W = masks.words_per_row();
  for (int t = 0; t < kVocab; ++t)
    EXPECT_EQ((masks.row(3)[t / 32] >> (t % 32)) & 1u, t == kEos ? 1u : 0u) << t;
  const uint32_t* packed = masks.Compute();
  ASSERT_TRUE(masks.computed());
  for (int r = 1; r < 4; ++r)
    EXPECT_TRUE(std::equal(masks.row(r), masks.row(r) + W, packed + r * W)) << r;
  for (int w = 0; w < W; ++w) EXPECT_EQ(packed[w], ~0u);
  EXPECT_EQ(masks.mask_times().count(), 3);
}

TEST(LatencyHistogram, QuantilesAreBucketUpperBounds) {
  LatencyHistogram h;
  EXPECT_EQ(h.Quantile(0.5), 0);
  for (int i = 0; i < 99; ++i) h.Add(10e-6);
  h.Add(1e-3);
  EXPECT_EQ(h.count(), 100);
  EXPECT_GE(h.Quantile(0.5), 10e-6);
  EXPECT_LT(h.Quantile(0.5), 10e-6 * 1.2);
  EXPECT_GE(h.Quantile(1.0), 1e-3);
  EXPECT_LT(h.Quantile(1.0), 1e-3 * 1.2);
  EXPECT_LT(h.Quantile(0.99), 1e-3);
}

TEST_F(StructuredEngine, EveryOutputFollowsItsGrammar) {
  const auto record = Compile(kRecord);
  const auto number = Compile(json{{"type", "number"}});
  std::shared_ptr<CompiledGrammar> object;
  ASSERT_TRUE(CompiledGrammar::Compile(JsonObjectGrammar(), trie_, &object).ok());
  std::vector<Request> reqs;
  for (int i = 0; i < 24; ++i) {
    const auto& g = i % 3 == 0 ? record : i % 3 == 1 ? object : number;
    reqs.push_back(Req("r" + std::to_string(i), g, i % 4 == 0 ? 0.f : 1.f, 100 + i));
  }
  reqs[5].n = 3;
  reqs[6].params.ignore_eos = true;
  reqs[7].params.top_k = 5;
  reqs[8].params.logprobs = 2;
  auto e = Engine();
  const auto out = Run(e.get(), reqs);
  ASSERT_EQ(out.size(), reqs.size());
  int stopped = 0;
  for (const Request& r : reqs) {
    const RequestOutput& o = out.at(r.id);
    ASSERT_TRUE(o.ok()) << o.error;
    ASSERT_EQ(o.completions.size(), static_cast<size_t>(r.n));
    for (const Completion& c : o.completions) {
      const bool stop = c.finish_reason == "stop";
      EXPECT_TRUE(Follows(r.grammar, c.text, stop)) << r.id << " " << c.finish_reason;
      if (stop) {
        ++stopped;
        const json doc = json::parse(c.text, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << c.text;
        if (r.grammar == record) {
          EXPECT_TRUE(doc.is_object() && doc.size() == 4 && doc["name"].is_string() &&
                      doc["age"].is_number_integer() && doc["ok"].is_boolean())
              << c.text;
        }
        if (r.grammar == object) {
          EXPECT_TRUE(doc.is_object()) << c.text;
        }
        if (r.grammar == number) {
          EXPECT_TRUE(doc.is_number()) << c.text;
        }
      } else {
        EXPECT_EQ(c.finish_reason, "length");
        EXPECT_EQ(c.ids.size(), static_cast<size_t>(r.params.max_tokens));
      }
    }
  }
  std::printf("%d of %zu completions finished their document\n", stopped, reqs.size() + 2);
  EXPECT_GT(stopped, 0);
  EXPECT_EQ(e->stats().constrained_requests, static_cast<int64_t>(reqs.size()));
  EXPECT_EQ(e->stats().grammar_dead_ends, 0);
  EXPECT_GT(e->mask_times().count(), 0);
}

TEST_F(StructuredEngine, BatchInvariantAndNeighboursUnchanged) {
  const auto record = Compile(kRecord);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i)
    reqs.push_back(Req("b" + std::to_string(i), i % 2 ? record : nullptr, 1.f, 7 + i, 48));
  auto together = Engine();
  const auto all = Run(together.get(), reqs);
  for (const Request& r : reqs) {
    auto alone_engine = Engine();
    const auto alone = Run(alone_engine.get(), {r});
    EXPECT_EQ(alone.at(r.id).completions.at(0).ids, all.at(r.id).completions.at(0).ids) << r.id;
  }
}

// A lazy grammar (tool_choice "auto"): free until the trigger, then the grammar from the trigger
// on. Triggers are taken from a free greedy run's own tokens, so that the model does write them:
// a sample with the k-th token's bytes as its trigger makes the free run's first k + 1 tokens
// and then follows the grammar (which begins with the trigger); one whose trigger never comes is
// the free run; one at the start takes over at token 0; one whose grammar refuses the rest of
// the trigger's token goes on free. A trigger looked for only after a text (a reasoning model's
// </think>: Request::grammar_trigger_after) takes over as the plain one once the text came first
// (the first token's bytes), and never when the text never comes.
TEST_F(StructuredEngine, ALazyGrammarTakesOverAtItsTrigger) {
  const Tokenizer& tok = *model_.tokenizer;
  Request free = Req("free", nullptr, 1.f, 11, 40);
  free.params.ignore_eos = true;
  auto e0 = Engine();
  const Completion fc = Run(e0.get(), {free}).at("free").completions.at(0);
  ASSERT_EQ(fc.ids.size(), 40u);
  std::vector<std::string> bytes;
  for (int32_t id : fc.ids) bytes.push_back(tok.TokenBytes(id));
  auto joined = [&](size_t from, size_t to) {
    std::string s;
    for (size_t i = from; i < to; ++i) s += bytes[i];
    return s;
  };
  // A token from the fourth on, of two bytes or more, UTF-8 (as a grammar's literals are), whose
  // bytes less their last first appear there.
  size_t k = 3;
  for (; k < bytes.size(); ++k) {
    const std::string& b = bytes[k];
    const std::string head = joined(0, k), cut = b.substr(0, b.size() - 1);
    if (b.size() >= 2 && IsUtf8(b) && IsUtf8(cut) && (head + cut).find(cut) == head.size() &&
        b.back() != '\x01')
      break;
  }
  ASSERT_LT(k, bytes.size()) << "no token to trigger on";
  ASSERT_TRUE(IsUtf8(bytes[0])) << "a lexeme is UTF-8";
  // The trigger `t`, then `then`, then a record.
  auto lazy_grammar = [&](const std::string& t, const std::string& then) {
    Grammar g;
    EXPECT_TRUE(CompileJsonSchema(kRecord, &g).ok());
    const Grammar::Symbol rule = g.NewRule("lazy");
    std::vector<Grammar::Symbol> rhs = {g.Literal(t + then), {g.start(), false}};
    g.AddAlternative(rule, rhs);
    g.set_start(rule);
    std::shared_ptr<CompiledGrammar> c;
    const Status st = CompiledGrammar::Compile(std::move(g), trie_, &c);
    EXPECT_TRUE(st.ok()) << st.message();
    return c;
  };
  auto like_free = [&](const std::string& id, std::shared_ptr<CompiledGrammar> g,
                       const std::string& trigger, bool at_start, const std::string& after = "") {
    Request r = free;
    r.id = id;
    r.grammar = std::move(g);
    r.grammar_trigger = trigger;
    r.grammar_trigger_at_start = at_start;
    r.grammar_trigger_after = after;
    return r;
  };
  const std::string cut = bytes[k].substr(0, bytes[k].size() - 1);
  const std::vector<Request> reqs = {
      free,
      like_free("lazy", lazy_grammar(bytes[k], ""), bytes[k], false),
      like_free("never", lazy_grammar("\x01never\x02", ""), "\x01never\x02", false),
      like_free("start", lazy_grammar(bytes[0], ""), bytes[0], true),
      like_free("refused", lazy_grammar(cut, "\x01"), cut, false),
      like_free("armed", lazy_grammar(bytes[k], ""), bytes[k], false, bytes[0]),
      like_free("unarmed", lazy_grammar(bytes[k], ""), bytes[k], false, "\x01never\x02"),
  };
  auto e = Engine();
  const auto out = Run(e.get(), reqs);
  const Completion& lazy = out.at("lazy").completions.at(0);
  ASSERT_GT(lazy.ids.size(), k);
  EXPECT_TRUE(
      std::equal(fc.ids.begin(), fc.ids.begin() + static_cast<long>(k) + 1, lazy.ids.begin()));
  EXPECT_EQ(lazy.grammar_from_token, static_cast<int>(k));
  EXPECT_EQ(lazy.grammar_from_byte, 0);
  const bool stop = lazy.finish_reason == "stop";
  std::string from_k;
  for (size_t i = k; i < lazy.ids.size() - (stop ? 1 : 0); ++i)
    from_k += tok.TokenBytes(lazy.ids[i]);
  EXPECT_TRUE(Follows(reqs[1].grammar, from_k, stop)) << lazy.finish_reason;
  EXPECT_EQ(out.at("never").completions.at(0).ids, fc.ids);
  EXPECT_EQ(out.at("never").completions.at(0).grammar_from_token, -1);
  const Completion& start = out.at("start").completions.at(0);
  EXPECT_EQ(start.grammar_from_token, 0);
  EXPECT_EQ(start.ids.at(0), fc.ids.at(0));
  const Completion& refused = out.at("refused").completions.at(0);
  EXPECT_EQ(refused.ids, fc.ids) << "a refused trigger leaves the sample free";
  EXPECT_EQ(refused.grammar_from_token, -1);
  const Completion& armed = out.at("armed").completions.at(0);
  EXPECT_EQ(armed.ids, lazy.ids);
  EXPECT_EQ(armed.grammar_from_token, static_cast<int>(k));
  EXPECT_EQ(armed.grammar_from_byte, 0);
  EXPECT_EQ(out.at("unarmed").completions.at(0).ids, fc.ids);
  EXPECT_EQ(out.at("unarmed").completions.at(0).grammar_from_token, -1);
  EXPECT_EQ(e->stats().grammar_triggers, 4);
  EXPECT_EQ(e->stats().grammar_triggers_refused, 1);
  EXPECT_EQ(e->stats().grammar_dead_ends, 0);
  EXPECT_EQ(out.at("free").completions.at(0).grammar_from_token, -1);
}

TEST_F(StructuredEngine, RefusedWithoutTokenizerOrWithMinTokens) {
  const auto record = Compile(kRecord);
  EngineOptions opt;
  opt.num_blocks = 64;
  std::unique_ptr<LlmEngine> bare;
  ASSERT_TRUE(LlmEngine::Create(model_.cfg, model_.backend.get(), nullptr, opt, &bare).ok());
  Request r = Req("x", record, 0.f, 1);
  auto out = Run(bare.get(), {r});
  EXPECT_NE(out.at("x").error.find("tokenizer"), std::string::npos) << out.at("x").error;
  auto e = Engine();
  r.params.min_tokens = 3;
  out = Run(e.get(), {r});
  EXPECT_NE(out.at("x").error.find("min_tokens"), std::string::npos) << out.at("x").error;
}

// A mask past the grammar's fuel (CompiledGrammar::mask_fuel) is given up, the same way whichever
// matcher computes it: a grammar nested inside itself (whitespace inside whitespace), whose masks
// walk the vocabulary's whitespace tokens through an ambiguous rule, fails its request with an
// error naming the cost, and the request beside it finishes. With the default fuel the same
// masks are whole.
TEST_F(StructuredEngine, AMaskPastItsFuelFailsTheRequestAlike) {
  const std::string text = "root ::= \"[\" ws \"]\"\nws ::= ([ \\t\\n] ws [ \\t\\n]?)?\n";
  auto compile = [&](int64_t fuel) {
    Grammar g;
    EXPECT_TRUE(CompileGbnf(text, &g).ok());
    std::shared_ptr<CompiledGrammar> c;
    EXPECT_TRUE(CompiledGrammar::Compile(std::move(g), trie_, &c).ok());
    c->set_mask_fuel(fuel);
    return c;
  };
  // The work of the mask after "[" and n spaces, with the default fuel: it grows with n.
  const auto whole = compile(CompiledGrammar::kDefaultMaskFuel);
  std::vector<int64_t> work;
  Matcher m(whole);
  ASSERT_TRUE(m.Consume("["));
  for (int n = 0; n < 12; ++n) {
    const TokenMask& mask = m.Mask();
    EXPECT_FALSE(m.exhausted());
    EXPECT_TRUE(mask.Test(model_.tokenizer->Encode("]").at(0)));
    work.push_back(m.mask_work());
    ASSERT_TRUE(m.Consume(" "));
  }
  ASSERT_GT(work.back(), work.front());
  // A fuel between the first masks' work and the last's: given up from the same position in
  // every matcher, fresh grammar or one whose masks another matcher kept.
  const int64_t fuel = (work.front() + work.back()) / 2;
  const size_t first = static_cast<size_t>(
      std::find_if(work.begin(), work.end(), [&](int64_t w) { return w > fuel; }) - work.begin());
  ASSERT_LT(first, work.size());
  const auto tight = compile(fuel);
  for (int pass = 0; pass < 2; ++pass) {  // the second finds the masks the first kept
    Matcher t(tight);
    ASSERT_TRUE(t.Consume("["));
    for (size_t n = 0; n < work.size(); ++n) {
      const TokenMask& mask = t.Mask();
      EXPECT_EQ(t.exhausted(), n >= first) << "pass " << pass << ", " << n << " spaces";
      if (t.exhausted()) {  // given up: empty
        EXPECT_TRUE(std::all_of(mask.words().begin(), mask.words().end(),
                                [](uint32_t w) { return w == 0; }));
      }
      ASSERT_TRUE(t.Consume(" "));
    }
  }
  // In the engine: the request fails naming the fuel; the one beside it finishes.
  Request r = Req("ws", compile(1), 0.f, 1, 16);
  Request free = Req("free", nullptr, 0.f, 1, 16);
  auto e = Engine();
  const auto out = Run(e.get(), {r, free});
  EXPECT_NE(out.at("ws").error.find("grammar: a mask took more than 1 steps of the parser"),
            std::string::npos)
      << out.at("ws").error;
  EXPECT_TRUE(out.at("free").ok()) << out.at("free").error;
  EXPECT_EQ(out.at("free").completions.at(0).ids.size(), 16u);
}

}  // namespace
}  // namespace llmq
