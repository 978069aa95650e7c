#include "engine/text/jinja.h"

#include "engine/text/jinja_ast.h"
#include "engine/text/jinja_eval.h"
#include "engine/text/jinja_parser.h"

namespace llmq::jinja {

Template::~Template() = default;

Status Template::Parse(std::string_view source, const std::string& origin,
                       std::unique_ptr<Template>* out) {
  auto program = std::make_unique<Program>();
  try {
    LLMQ_RETURN_IF_ERROR(ParseProgram(source, origin, program.get()));
  } catch (const std::exception& e) {  // std::bad_alloc: no exception leaves the API
    return Status::InvalidArgument(origin + ": " + e.what());
  }
  std::unique_ptr<Template> t(new Template());
  t->origin_ = origin;
  t->program_ = std::move(program);
  *out = std::move(t);
  return Status::Ok();
}

namespace {

// Converts the context and renders; nlohmann's exceptions (none expected) become errors.
template <class Json>
Status RenderJson(const Program& p, const std::string& origin, const Json& context,
                  std::string* out) {
  try {
    Value ctx;
    Status st = FromJson(context, &ctx);
    if (!st.ok()) return Status::InvalidArgument(origin + ": " + st.message());
    return RenderProgram(p, origin, ctx, out);
  } catch (const std::exception& e) {
    out->clear();
    return Status::InvalidArgument(origin + ": " + e.what());
  }
}

}  // namespace

Status Template::Render(const nlohmann::json& context, std::string* out) const {
  return RenderJson(*program_, origin_, context, out);
}

Status Template::RenderOrdered(const nlohmann::ordered_json& context, std::string* out) const {
  return RenderJson(*program_, origin_, context, out);
}

}  // namespace llmq::jinja
