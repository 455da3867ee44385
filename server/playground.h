// The playground: one browser page to try the served model, built into the binary (the files of
// server/playground/ become a C++ source at build time through server/playground/embed.cmake: no
// file, CDN or network is needed at run time) and served on the HTTP API's listener
// (--http-listen):
//   GET /                       index.html (prompt, size, steps, seed, guidance, LoRAs, reference
//                               images, Generate, progress, the result with its parameters and a
//                               download, this session's history)
//   GET /playground/app.js      its script
//   GET /playground/style.css   its style sheet
// These routes need no bearer token: the page is public, and it calls only the public HTTP API
// (GET /v1/models, POST /v1/images/generations, POST /v1/images/edits) with the token the user
// types (kept in the tab's sessionStorage). Every answer carries kContentSecurityPolicy (scripts,
// styles and connections to this origin only; images also data: and blob:, the results), nosniff,
// no-referrer and Cache-Control: no-cache (a new build's page is never mixed with an old script).
//
// Thread-safety: the embedded files are constant; Register installs handlers that only read them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace ditserve::server::playground {

// A file of server/playground/ as embedded (generated source).
struct EmbeddedFile {
  const char* name;  // e.g. "index.html"
  const unsigned char* data;
  size_t size;
};
extern const EmbeddedFile kFiles[];
extern const size_t kFileCount;

constexpr char kContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// One route: its URL path, Content-Type and body.
struct Asset {
  std::string path;  // "/" for index.html, "/playground/<name>" for the others
  std::string content_type;
  absl::string_view body;
};

// The routes of the embedded files (index.html first).
std::vector<Asset> Assets();

// Installs GET for each of Assets() on `server` (no token checked).
void Register(httplib::Server& server);

}  // namespace ditserve::server::playground
