#include "kforge/results/server.h"

#include <httplib.h>

#include <exception>
#include <functional>

#include "kforge/results/samples.h"
#include "web/html.h"
#include "web_pages.h"

namespace kforge::results {

namespace {

using Page = std::function<Result<std::string>(const web::Site&, const httplib::Request&)>;

struct Route {
  const char* pattern;
  const char* content_type;
  Page render;
};

// Every page, in one table.
const std::vector<Route>& Routes() {
  static const std::vector<Route> routes = {
      {R"(/)", "text/html; charset=utf-8",
       [](const web::Site& s, const httplib::Request& r) {
         return web::LeaderboardPage(s, r.get_param_value("by"));
       }},
      {R"(/run/([^/]+))", "text/html; charset=utf-8",
       [](const web::Site& s, const httplib::Request& r) { return web::RunPage(s, r.matches[1]); }},
      {R"(/api/run/([^/]+)/progress)", "application/json",
       [](const web::Site& s, const httplib::Request& r) {
         return web::RunProgressJson(s, r.matches[1]);
       }},
      {R"(/session/([^/]+)/(\d{1,15}))", "text/html; charset=utf-8",
       [](const web::Site& s, const httplib::Request& r) {
         return web::SessionPage(s, r.matches[1], std::stoll(r.matches[2]));
       }},
      {R"(/task/([^/]+))", "text/html; charset=utf-8",
       [](const web::Site& s, const httplib::Request& r) {
         return web::TaskPage(s, r.matches[1]);
       }},
  };
  return routes;
}

int HttpStatus(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kInvalidInput:
      return 400;
    default:
      return 500;
  }
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  int port = 0;

  web::Site Site() const {
    return web::Site{options.run_dirs.empty() ? ListRunDirs(options.runs_root) : options.run_dirs};
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }

Result<std::unique_ptr<Server>> Server::Bind(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Impl* self = impl.get();
  for (const Route& route : Routes()) {
    self->http.Get(
        route.pattern, [self, &route](const httplib::Request& req, httplib::Response& res) {
          // Exceptions (from a library or std::stoll) end here, as a 500 page.
          try {
            auto page = route.render(self->Site(), req);
            if (page.ok()) {
              res.set_content(*page, route.content_type);
            } else {
              res.status = HttpStatus(page.status().kind());
              res.set_content(
                  HtmlDocument("kforge: error", "<h1>" + std::to_string(res.status) + "</h1><p>" +
                                                    HtmlEscape(page.status().message()) +
                                                    "</p><p><a href=\"/\">leaderboard</a></p>"),
                  "text/html; charset=utf-8");
            }
          } catch (const std::exception& e) {
            res.status = 500;
            res.set_content(std::string("internal error: ") + e.what(), "text/plain");
          }
        });
  }
  // Anything no route matched: a page that says so, not an empty body.
  self->http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    res.set_content(HtmlDocument("kforge: error", "<h1>" + std::to_string(res.status) +
                                                      "</h1><p>nothing at " + HtmlEscape(req.path) +
                                                      "</p><p><a href=\"/\">leaderboard</a></p>"),
                    "text/html; charset=utf-8");
  });
  if (options.port < 0 || options.port > 65535) {
    return Error(ErrorKind::kInvalidInput, "--port " + std::to_string(options.port) +
                                               ": expected 1..65535 (or 0 for any free port)");
  }
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind
  // a port already listening and share its requests at random: address reuse
  // only, so a busy port is refused.
  self->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  if (options.port == 0) {
    self->port = self->http.bind_to_any_port(options.host.c_str());
    if (self->port <= 0)
      return Error(ErrorKind::kIo, "cannot bind " + options.host + " to any port");
  } else {
    if (!self->http.bind_to_port(options.host.c_str(), options.port)) {
      return Error(ErrorKind::kIo, "cannot bind " + options.host + ":" +
                                       std::to_string(options.port) +
                                       " (in use, or not an address of this machine)");
    }
    self->port = options.port;
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }

Status Server::Run() {
  if (!impl_->http.listen_after_bind())
    return Error(ErrorKind::kIo, "server stopped with an error");
  return Status::Ok();
}

void Server::Stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace kforge::results
