// Renders a parsed chat template against a context, with jinja2's scoping: a for loop gives
// each iteration a fresh scope over the enclosing one (so a `set` inside a loop is gone after
// it, which is why templates use namespace()), if-blocks share their enclosing scope, and macros
// see the scope they were defined in.
#pragma once

#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace medtune::tokenizer::jinja {

// Renders `body` with `context` (names visible to the template, on top of the transformers
// globals). Evaluation errors, including raise_exception(), throw BadInput naming origin,
// line and column.
std::string render_template(const Body& body, const Dict& context, const std::string& origin);

}  // namespace medtune::tokenizer::jinja
