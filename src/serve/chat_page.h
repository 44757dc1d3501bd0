// GET /: a chat page for a clinician, served by the binary itself (no external assets, no CDN):
// model/adapter picker (from /v1/models), system prompt, streamed answer, optional API key, and a
// note that the model is a research tool.
#pragma once

#include <string>

namespace medtune::serve {

const std::string& chat_page_html();

}  // namespace medtune::serve
