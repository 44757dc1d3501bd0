// Builds the statement tree of a chat template from its tokens. Everything outside the
// supported Jinja subset is rejected here, at load time, with origin, line and column, so a
// model whose template we cannot render fails when it is opened, not in the middle of a run.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace medtune::tokenizer::jinja {

Body parse_template(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace medtune::tokenizer::jinja
