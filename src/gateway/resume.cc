#include "gateway/resume.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <fmt/format.h>

namespace bmas::gateway {
namespace {

constexpr std::string_view kData = "data: ";

// The JSON of a "data: {...}\n\n" event, or "" when it is not one.
std::string_view EventJson(std::string_view event) {
  if (event.substr(0, kData.size()) != kData) return {};
  std::string_view data = event.substr(kData.size());
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.remove_suffix(1);
  if (data.empty() || data.front() != '{') return {};
  return data;
}

std::string Write(const rapidjson::Document& d) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  d.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace

void StreamResume::LearnIdentity(std::string_view event) {
  if (!id_.empty()) return;
  std::string_view json = EventJson(event);
  if (json.empty()) return;
  rapidjson::Document d;
  d.Parse(json.data(), json.size());
  if (d.HasParseError() || !d.IsObject()) return;
  auto id = d.FindMember("id");
  if (id != d.MemberEnd() && id->value.IsString()) id_ = id->value.GetString();
  auto created = d.FindMember("created");
  if (created != d.MemberEnd() && created->value.IsInt64()) created_ = created->value.GetInt64();
}

Result<std::string> StreamResume::NextBody() {
  rapidjson::Document d;
  d.Parse(body_.data(), body_.size());
  if (d.HasParseError() || !d.IsObject()) return InvalidArgument("the request is not a JSON object");
  auto& alloc = d.GetAllocator();
  auto n = d.FindMember("n");
  if (n != d.MemberEnd() && !(n->value.IsInt() && n->value.GetInt() == 1)) {
    return InvalidArgument("a stream of several choices (n > 1) cannot be resumed");
  }
  auto echo = d.FindMember("echo");
  if (echo != d.MemberEnd() && echo->value.IsBool() && echo->value.GetBool()) {
    return InvalidArgument("a stream that echoes its prompt cannot be resumed");
  }
  // Fewer tokens left to generate.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto m = d.FindMember(key);
    if (m == d.MemberEnd() || m->value.IsNull()) continue;
    if (!m->value.IsInt64()) return InvalidArgument(fmt::format("{} is not an integer", key));
    const int64_t left = m->value.GetInt64() - tokens_;
    if (left < 1) return InvalidArgument("the stream had already received all its tokens");
    m->value.SetInt64(left);
  }
  if (chat_) {
    auto messages = d.FindMember("messages");
    if (messages == d.MemberEnd() || !messages->value.IsArray() || messages->value.Empty()) {
      return InvalidArgument("the request has no messages");
    }
    auto& list = messages->value;
    auto cont = d.FindMember("continue_final_message");
    const bool continuing = cont != d.MemberEnd() && cont->value.IsBool() && cont->value.GetBool();
    auto& last = list[list.Size() - 1];
    if (continuing && last.IsObject() && last.HasMember("content") && last["content"].IsString()) {
      // The client itself continued an assistant message: its text grows.
      std::string joined = std::string(last["content"].GetString()) + text_;
      last["content"].SetString(joined.c_str(), static_cast<rapidjson::SizeType>(joined.size()),
                                alloc);
    } else {
      rapidjson::Value message(rapidjson::kObjectType);
      message.AddMember("role", "assistant", alloc);
      message.AddMember("content",
                        rapidjson::Value(text_.c_str(),
                                         static_cast<rapidjson::SizeType>(text_.size()), alloc),
                        alloc);
      list.PushBack(message, alloc);
    }
    for (auto [key, value] : {std::pair{"continue_final_message", true},
                              std::pair{"add_generation_prompt", false}}) {
      auto m = d.FindMember(key);
      if (m != d.MemberEnd()) {
        m->value.SetBool(value);
      } else {
        d.AddMember(rapidjson::StringRef(key), value, alloc);
      }
    }
  } else {
    auto prompt = d.FindMember("prompt");
    if (prompt == d.MemberEnd()) return InvalidArgument("the request has no prompt");
    rapidjson::Value* text = &prompt->value;
    if (text->IsArray() && text->Size() == 1) text = &(*text)[0];
    if (!text->IsString()) {
      return InvalidArgument("a prompt of token ids or of several prompts cannot be resumed");
    }
    std::string joined = std::string(text->GetString(), text->GetStringLength()) + text_;
    text->SetString(joined.c_str(), static_cast<rapidjson::SizeType>(joined.size()), alloc);
  }
  ++resumptions_;
  tokens_before_ = tokens_;
  return Write(d);
}

std::string StreamResume::Rewrite(std::string_view event) const {
  std::string_view json = EventJson(event);
  if (json.empty()) return std::string(event);  // [DONE], comments
  rapidjson::Document d;
  d.Parse(json.data(), json.size());
  if (d.HasParseError() || !d.IsObject()) return std::string(event);
  auto& alloc = d.GetAllocator();
  auto choices = d.FindMember("choices");
  if (choices != d.MemberEnd() && choices->value.IsArray() && !choices->value.Empty()) {
    const auto& first = choices->value[0];
    // The chat stream's opening chunk names the role only: the client has had one.
    if (first.IsObject() && first.HasMember("delta") && first["delta"].IsObject()) {
      const auto& delta = first["delta"];
      const bool has_role = delta.HasMember("role");
      const bool has_content = delta.HasMember("content") && delta["content"].IsString() &&
                               delta["content"].GetStringLength() > 0;
      const bool finished = first.HasMember("finish_reason") && !first["finish_reason"].IsNull();
      if (has_role && !has_content && !finished) return "";
    }
  }
  if (!id_.empty()) {
    auto id = d.FindMember("id");
    if (id != d.MemberEnd()) {
      id->value.SetString(id_.c_str(), static_cast<rapidjson::SizeType>(id_.size()), alloc);
    }
    auto created = d.FindMember("created");
    if (created != d.MemberEnd() && created_ != 0) created->value.SetInt64(created_);
  }
  auto usage = d.FindMember("usage");
  if (usage != d.MemberEnd() && usage->value.IsObject()) {
    auto& u = usage->value;
    // The replica counted the text it was given as prompt; the client sent less and received
    // more.
    if (u.HasMember("prompt_tokens") && u["prompt_tokens"].IsInt64() &&
        u.HasMember("completion_tokens") && u["completion_tokens"].IsInt64()) {
      const int64_t prompt = std::max<int64_t>(0, u["prompt_tokens"].GetInt64() - tokens_before_);
      const int64_t completion = u["completion_tokens"].GetInt64() + tokens_before_;
      u["prompt_tokens"].SetInt64(prompt);
      u["completion_tokens"].SetInt64(completion);
      if (u.HasMember("total_tokens")) u["total_tokens"].SetInt64(prompt + completion);
    }
  }
  return fmt::format("data: {}\n\n", Write(d));
}

}  // namespace bmas::gateway
