// Errors the server answers with: an HTTP status and OpenAI's error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// so that the official clients raise their matching exception (BadRequestError for 400,
// AuthenticationError for 401, NotFoundError for 404, ...). Thrown by request decoding and the
// engine; the HTTP layer turns it into the response. Never carries a stack trace or a host path.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace medtune::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }

  nlohmann::json body() const {
    nlohmann::json e = {{"message", what()}, {"type", type_}};
    e["param"] = param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_);
    e["code"] = code_.empty() ? nlohmann::json(nullptr) : nlohmann::json(code_);
    return {{"error", e}};
  }

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400: the body is not valid JSON, or a field is missing, of the wrong type or out of range.
// `param` names the field as OpenAI does ("messages[1].content", "max_tokens").
inline ApiError invalid_request(const std::string& message, const std::string& param = "") {
  return ApiError(400, "invalid_request_error", message, param);
}

}  // namespace medtune::serve
