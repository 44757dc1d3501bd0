// Request decoding: the forms OpenAI clients send are accepted, and every invalid field is a 400
// naming that field (OpenAI's "param").
#include <gtest/gtest.h>

#include "serve/request.h"

namespace medtune::serve {
namespace {

const RequestLimits kLimits;

// The ApiError a decode throws, or a failure when it throws nothing.
template <typename F>
ApiError error_of(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return ApiError(0, "", "");
}

TEST(ChatRequest, DecodesWhatTheOpenAIClientSends) {
  const auto r = decode_chat_request(R"({"model":"m","messages":[{"role":"system","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "max_completion_tokens":7,"temperature":0,"top_p":0.5,"seed":-3,"stop":["x","yy"],"n":2,
      "logprobs":true,"top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},"user":"ignored"})",
                                     kLimits);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(*r.sampling.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(*r.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_TRUE(r.sampling.include_usage);
}

TEST(ChatRequest, NullMeansAbsentAndDeveloperIsSystem) {
  const auto r = decode_chat_request(
      R"({"model":"m","messages":[{"role":"developer","content":"d"}],"max_tokens":null,"stop":null,"seed":null})", kLimits);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_FALSE(r.sampling.max_tokens.has_value());
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default
}

TEST(ChatRequest, EachInvalidFieldIsNamed) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages":[{"role":"user","content":"a"}]})", "model"},
      {R"({"model":1,"messages":[{"role":"user","content":"a"}]})", "model"},
      {R"({"model":"m"})", "messages"},
      {R"({"model":"m","messages":[]})", "messages"},
      {R"({"model":"m","messages":[{"role":"tool","content":"a"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":0})", "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":99999999})", "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"temperature":3})", "temperature"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"temperature":"hot"})", "temperature"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"top_p":-0.1})", "top_p"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"n":0})", "n"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"n":9})", "n"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"stop":[""]})", "stop[0]"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"stop":["a","b","c","d","e"]})", "stop"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"stop":5})", "stop"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"top_logprobs":2})", "top_logprobs"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"model":"m","messages":[{"role":"user","content":"a"}],"stream":"yes"})", "stream"},
  };
  for (const auto& c : cases) {
    const ApiError e = error_of([&] { decode_chat_request(c.body, kLimits); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
  }
}

TEST(ChatRequest, NotJsonOrNotAnObjectIs400WithoutParam) {
  for (const char* body : {"", "{", "[1,2]", "\"x\"", "{\"model\":\"m\",}", "\xff\xfe"}) {
    const ApiError e = error_of([&] { decode_chat_request(body, kLimits); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), "") << body;
  }
}

TEST(CompletionRequest, PromptForms) {
  auto r = decode_completion_request(R"({"model":"m","prompt":"hi"})", kLimits, 100);
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"hi"}));
  r = decode_completion_request(R"({"model":"m","prompt":["a","b"]})", kLimits, 100);
  EXPECT_EQ(r.prompt_count(), 2u);
  r = decode_completion_request(R"({"model":"m","prompt":[1,2,99]})", kLimits, 100);
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2, 99}}));
  // lm-eval's local-completions, tokenized: a batch of token lists, echo, logprobs 1, max_tokens 1.
  r = decode_completion_request(R"({"model":"m","prompt":[[1,2],[3]],"echo":true,"logprobs":1,"max_tokens":1,
                                    "temperature":0,"seed":1234})",
                                kLimits, 100);
  EXPECT_EQ(r.prompt_ids.size(), 2u);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(*r.logprobs, 1);
  r = decode_completion_request(R"({"model":"m","prompt":"x","echo":true,"max_tokens":0})", kLimits, 100);
  EXPECT_EQ(*r.sampling.max_tokens, 0);
}

TEST(CompletionRequest, InvalidPromptsAreNamed) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"model":"m"})", "prompt"},
      {R"({"model":"m","prompt":[]})", "prompt"},
      {R"({"model":"m","prompt":5})", "prompt"},
      {R"({"model":"m","prompt":[1,100]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1,-1]})", "prompt[1]"},
      {R"({"model":"m","prompt":[[1],[]]})", "prompt"},
      {R"({"model":"m","prompt":[[1],5]})", "prompt[1]"},
      {R"({"model":"m","prompt":["a",5]})", "prompt[1]"},
      {R"({"model":"m","prompt":"a","max_tokens":0})", "max_tokens"},
      {R"({"model":"m","prompt":"a","logprobs":21})", "logprobs"},
      {R"({"model":"m","prompt":"a","echo":1})", "echo"},
  };
  for (const auto& c : cases) {
    const ApiError e = error_of([&] { decode_completion_request(c.body, kLimits, 100); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
  }
  std::string many = R"({"model":"m","prompt":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "[1]";
  many += "]}";
  EXPECT_EQ(error_of([&] { decode_completion_request(many, kLimits, 100); }).param(), "prompt");
}

}  // namespace
}  // namespace medtune::serve
