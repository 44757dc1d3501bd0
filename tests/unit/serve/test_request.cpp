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
                                     kLimits, 100);
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
      R"({"model":"m","messages":[{"role":"developer","content":"d"}],"max_tokens":null,"stop":null,"seed":null})",
      kLimits, 100);
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
    const ApiError e = error_of([&] { decode_chat_request(c.body, kLimits, 100); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
  }
}

TEST(ChatRequest, NotJsonOrNotAnObjectIs400WithoutParam) {
  for (const char* body : {"", "{", "[1,2]", "\"x\"", "{\"model\":\"m\",}", "\xff\xfe"}) {
    const ApiError e = error_of([&] { decode_chat_request(body, kLimits, 100); });
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

TEST(SamplingRequest, PenaltiesAndLogitBias) {
  const auto r = decode_chat_request(R"({"model":"m","messages":[{"role":"user","content":"a"}],
      "presence_penalty":-2,"frequency_penalty":1.5,"logit_bias":{"99":-100,"0":100,"7":0.5}})",
                                     kLimits, 100);
  EXPECT_EQ(r.sampling.presence_penalty, -2.0f);
  EXPECT_EQ(r.sampling.frequency_penalty, 1.5f);
  // Ascending ids, whatever the order of the object's keys.
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {7, 0.5f}, {99, -100.0f}}));
  const auto c = decode_completion_request(
      R"({"model":"m","prompt":"a","logit_bias":{"3":1},"frequency_penalty":0})", kLimits, 100);
  EXPECT_EQ(c.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 1.0f}}));
}

TEST(SamplingRequest, InvalidPenaltiesAndBiasesAreNamed) {
  struct Case {
    const char* fields;
    const char* param;
  };
  const Case cases[] = {
      {R"("presence_penalty":2.5)", "presence_penalty"},
      {R"("frequency_penalty":-3)", "frequency_penalty"},
      {R"("frequency_penalty":"high")", "frequency_penalty"},
      {R"("logit_bias":[1,2])", "logit_bias"},
      {R"("logit_bias":{"100":1})", "logit_bias"},  // outside the vocabulary of 100
      {R"("logit_bias":{"-1":1})", "logit_bias"},
      {R"("logit_bias":{"05":1})", "logit_bias"},  // two spellings of one token
      {R"("logit_bias":{"five":1})", "logit_bias"},
      {R"("logit_bias":{"99999999999999999999":1})", "logit_bias"},
      {R"("logit_bias":{"5":101})", R"(logit_bias["5"])"},
      {R"("logit_bias":{"5":"up"})", R"(logit_bias["5"])"},
  };
  for (const auto& c : cases) {
    for (const bool chat : {true, false}) {
      const std::string body =
          chat ? std::string(R"({"model":"m","messages":[{"role":"user","content":"a"}],)") +
                     c.fields + "}"
               : std::string(R"({"model":"m","prompt":"a",)") + c.fields + "}";
      const ApiError e = error_of([&] {
        if (chat)
          decode_chat_request(body, kLimits, 100);
        else
          decode_completion_request(body, kLimits, 100);
      });
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_EQ(e.param(), c.param) << body << ": " << e.what();
    }
  }
}

TEST(SamplingRequest, UnimplementedParametersAreRefusedUnlessTheyAskForNothing) {
  // Values that change nothing: accepted, as clients sending their defaults expect.
  for (const char* fields :
       {R"("response_format":{"type":"text"})", R"("tools":[])", R"("tool_choice":"none")",
        R"("min_p":0)", R"("min_p":0.0)", R"("repetition_penalty":1)", R"("ignore_eos":false)",
        R"("best_of":1)", R"("n":2,"best_of":2)", R"("suffix":"")", R"("modalities":["text"])",
        R"("user":"u","metadata":{"a":"b"},"some_future_field":3)"}) {
    const std::string body = std::string(R"({"model":"m","prompt":"a",)") + fields + "}";
    EXPECT_NO_THROW(decode_completion_request(body, kLimits, 100)) << body;
  }
  // Values that ask for something this server does not do: a 400 naming the field.
  struct Case {
    const char* fields;
    const char* param;
  };
  const Case cases[] = {
      {R"("response_format":{"type":"json_object"})", "response_format"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}])", "tools"},
      {R"("tool_choice":"auto")", "tool_choice"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("suffix":" end")", "suffix"},
      {R"("audio":{"voice":"alloy"})", "audio"},
      {R"("min_p":0.05)", "min_p"},
      {R"("repetition_penalty":1.1)", "repetition_penalty"},
      {R"("repeat_penalty":1.1)", "repeat_penalty"},
      {R"("ignore_eos":true)", "ignore_eos"},
      {R"("grammar":"root ::= [AB]")", "grammar"},
      {R"("guided_choice":["A","B"])", "guided_choice"},
      {R"("best_of":3)", "best_of"},
  };
  for (const auto& c : cases) {
    const std::string body =
        std::string(R"({"model":"m","messages":[{"role":"user","content":"a"}],)") + c.fields + "}";
    const ApiError e = error_of([&] { decode_chat_request(body, kLimits, 100); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), c.param) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("does not implement"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace medtune::serve
