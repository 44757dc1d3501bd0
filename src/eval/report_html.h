// A self-contained HTML evaluation report: one file, inline CSS and inline SVG charts, no script,
// no network, no external fonts, so it can be mailed, archived with the run, and opened on a
// hospital workstation that has no internet access.
//
// Shows, top to bottom: headline accuracy with its 95% interval and a plain-language sentence;
// a warning banner when the interval reaches the letter-prior baseline ("not distinguishable
// from guessing"); a strip placing model, letter prior and chance on one 0-100% axis; accuracy by
// meta_info; predicted vs gold letter distribution; a reliability diagram with ECE; provenance;
// and the methods, so that a statistician can check every number.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace medtune::eval {

// `report` is make_report()'s object ({"metrics": ..., "provenance": ...}), possibly read back
// from report.json. Every string taken from it is HTML-escaped. Throws BadInput naming the field
// when a required metric is missing or has the wrong type.
std::string render_html_report(const nlohmann::json& report);

// &, <, >, " and ' replaced by entities; safe in element content and in quoted attributes.
std::string html_escape(const std::string& text);

}  // namespace medtune::eval
