#include "apps/llama/openai_server.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/common/check.h"
#include "core/common/log.h"
#include "text/chat.h"

namespace colossal::llama_app {

using nlohmann::json;
using inference::FinishReason;
using inference::TokenEvent;

namespace {

// A 400 (or other) with the OpenAI error body.
struct ApiError {
  int status;
  std::string message, param, type = "invalid_request_error", code;
};

// Response JSON: text that is not valid UTF-8 (a quoted request, a token cut inside a character)
// becomes U+FFFD instead of an exception that would turn the answer into a 500.
std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Offset of the first byte of `s` that is not part of well-formed UTF-8, or npos.
size_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || (n == 2 && c < 0xc2) || i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1 < s.size() ? i + 1 : i]);
    if ((n == 3 && ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0))) ||  // overlong, surrogates
        (n == 4 && ((c == 0xf0 && c1 < 0x90) || c > 0xf4 || (c == 0xf4 && c1 >= 0x90))))
      return i;
    i += n;
  }
  return std::string::npos;
}

// The JSON key whose value holds byte `at` of `body` (the last "key": before it), or "".
std::string field_at(const std::string& body, size_t at) {
  std::string field;
  for (size_t i = 0; i < at && i < body.size(); ++i) {
    if (body[i] != '"') continue;
    size_t end = i + 1;
    while (end < at && body[end] != '"') end += body[end] == '\\' ? 2 : 1;
    if (end >= at) break;  // `at` is inside this string
    size_t colon = body.find_first_not_of(" \t\r\n", end + 1);
    if (colon != std::string::npos && body[colon] == ':') field = body.substr(i + 1, end - i - 1);
    i = end;
  }
  return field;
}

// Shuts down every TCP connection of this process whose local port is `port`. cpp-httplib keeps
// accepted sockets to itself, so they are found among the process's descriptors; shutdown()
// (not close) wakes a worker blocked reading one, and the worker then closes it as usual.
int close_connections_on_port(int port) {
  int closed = 0;
  std::vector<int> fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') fds.push_back(std::atoi(e->d_name));
    ::closedir(dir);
  }
  for (int fd : fds) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    int local = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                             : -1;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    if (local == port && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0) {
      ::shutdown(fd, SHUT_RDWR);
      ++closed;
    }
  }
  return closed;
}

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

// Histogram in Prometheus' cumulative form.
struct Histogram {
  std::vector<double> bounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  std::vector<uint64_t> counts = std::vector<uint64_t>(bounds.size() + 1, 0);
  double sum = 0;
  uint64_t total = 0;
  void observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++total;
  }
  void write(std::ostringstream& o, const std::string& name, const std::string& help) const {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cum += counts[i];
      o << name << "_bucket{le=\"" << bounds[i] << "\"} " << cum << '\n';
    }
    o << name << "_bucket{le=\"+Inf\"} " << total << '\n' << name << "_sum " << sum << '\n'
      << name << "_count " << total << '\n';
  }
};

// What a request's handler reads: the engine's events, in order (of every choice, for n > 1).
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> events;
  std::string model;  // the name the response carries: the base's, or the LoRA adapter's asked for
  std::vector<int64_t> ids;  // the engine request of choice i (under mu)
  bool closed = false;       // the response is over (no more choices are added; under mu)
  int64_t choice_of(int64_t request_id) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == request_id) return static_cast<int64_t>(i);
    return 0;
  }
};

// n > 1 completions of one prompt: choices 1 .. n-1 are added when choice 0 has its first token,
// so the prompt is prefilled once and its blocks shared through the prefix cache.
struct Fanout {
  int64_t n = 1;
  inference::GenerationRequest request;  // choice 0's, copied for the others
  std::atomic<bool> started{false};
};

// The next engine event for a response being written. While none comes, `keep_alive` is written
// every half second (it keeps proxies from timing out and fails once the client is gone).
// Returns false when the client is gone.
bool next_event(Channel& channel, httplib::DataSink& sink, const std::string& keep_alive, TokenEvent& out) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(channel.mu);
      if (channel.cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return !channel.events.empty(); })) {
        out = std::move(channel.events.front());
        channel.events.pop_front();
        return true;
      }
    }
    if (!sink.write(keep_alive.data(), keep_alive.size())) return false;
  }
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct OpenAIServer::State {
  inference::Engine& engine;
  std::shared_ptr<const text::Tokenizer> tok;
  ServerOptions options;
  httplib::Server svr;
  std::thread engine_thread;
  std::mutex wake_mu;
  std::condition_variable wake;
  std::atomic<bool> stopping{false}, quit{false}, stop_requested{false};
  std::atomic<int64_t> in_flight{0};

  std::mutex metrics_mu;  // everything below
  std::map<std::string, uint64_t> requests;  // by endpoint and status
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  Histogram ttft, latency;
  inference::EngineStats stats;  // snapshot after each engine step

  State(inference::Engine& e, std::shared_ptr<const text::Tokenizer> t, ServerOptions o)
      : engine(e), tok(std::move(t)), options(std::move(o)) {}

  void count(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(metrics_mu);
    ++requests[endpoint + "\",code=\"" + std::to_string(status)];
  }

  void engine_loop() {
    while (!quit.load()) {
      if (!engine.has_work()) {
        {
          std::unique_lock<std::mutex> lock(wake_mu);
          wake.wait_for(lock, std::chrono::milliseconds(20));
        }
        if (!options.step_when_idle || quit.load()) continue;
      }
      std::vector<inference::GenerationResult> finished;
      try {
        finished = engine.step();
      } catch (const std::exception& e) {
        // The engine fails requests it can attribute; anything else is logged, not fatal.
        COLOSSAL_LOG_ERROR("[serve] engine step failed: ", error_text(e));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::lock_guard<std::mutex> lock(metrics_mu);
      stats = engine.stats();
      for (const auto& r : finished) {
        if (r.reason == FinishReason::kCancelled || r.reason == FinishReason::kError) continue;
        ttft.observe(r.time_to_first_token_s);
        latency.observe(r.latency_s);
        prompt_tokens += r.prompt.size();
        generation_tokens += r.tokens.size();
      }
    }
  }

  // Text of one token for logprobs; ids past the tokenizer (a padded vocabulary) have none.
  std::string piece(int64_t id) const { return id >= 0 && id < tok->vocab_size() ? tok->piece(id) : ""; }

  // ---- request parsing

  template <typename T>
  static T number(const json& body, const char* key, T fallback, double lo, double hi) {
    if (!body.contains(key) || body[key].is_null()) return fallback;
    const auto& v = body[key];
    if (!v.is_number()) throw ApiError{400, std::string(key) + " must be a number", key};
    double d = v.get<double>();
    if (std::is_integral_v<T> && d != static_cast<double>(static_cast<int64_t>(d)))
      throw ApiError{400, std::string(key) + " must be an integer, got " + v.dump(), key};
    if (d < lo || d > hi) {
      std::ostringstream m;
      if (hi >= 1e9) m << key << " must be >= " << lo << ", got " << v.dump();
      else m << key << " must be in [" << lo << ", " << hi << "], got " << v.dump();
      throw ApiError{400, m.str(), key};
    }
    return static_cast<T>(d);
  }

  inference::SamplingParams sampling(const json& b) const {
    auto p = options.defaults;
    p.max_tokens = number<int64_t>(b, "max_tokens", p.max_tokens, 1, 1e9);
    if (b.contains("max_completion_tokens")) p.max_tokens = number<int64_t>(b, "max_completion_tokens", p.max_tokens, 1, 1e9);
    p.temperature = number<double>(b, "temperature", p.temperature, 0, 2);
    p.top_p = number<double>(b, "top_p", p.top_p, 1e-9, 1);
    p.top_k = number<int64_t>(b, "top_k", p.top_k, 0, 1e9);
    p.min_p = number<double>(b, "min_p", p.min_p, 0, 1);
    p.presence_penalty = number<double>(b, "presence_penalty", p.presence_penalty, -2, 2);
    p.frequency_penalty = number<double>(b, "frequency_penalty", p.frequency_penalty, -2, 2);
    p.repetition_penalty = number<double>(b, "repetition_penalty", p.repetition_penalty, 1e-6, 1e6);
    if (b.contains("seed") && !b["seed"].is_null()) p.seed = number<uint64_t>(b, "seed", 0, 0, 1.8e19);
    if (b.contains("stop") && !b["stop"].is_null()) {
      const auto& s = b["stop"];
      if (s.is_string()) p.stop = {s.get<std::string>()};
      else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
        p.stop = s.get<std::vector<std::string>>();
      else throw ApiError{400, "stop must be a string or an array of up to 4 strings", "stop"};
      for (const auto& x : p.stop)
        if (x.empty()) throw ApiError{400, "stop strings must not be empty", "stop"};
    }
    if (b.contains("ignore_eos") && !b["ignore_eos"].is_null()) {  // vLLM's extension
      if (!b["ignore_eos"].is_boolean()) throw ApiError{400, "ignore_eos must be a boolean", "ignore_eos"};
      p.ignore_eos = b["ignore_eos"].get<bool>();
    }
    if (b.contains("logprobs") && !b["logprobs"].is_null()) {
      const auto& l = b["logprobs"];
      if (l.is_boolean()) p.logprobs = l.get<bool>();
      else if (l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() <= 5) p.logprobs = l.get<int64_t>() > 0;
      else throw ApiError{400, "logprobs must be a boolean or an integer in [0, 5]", "logprobs"};
    }
    return p;
  }

  // The adapter a request's "model" names (0: the base model; absent: the base), as vLLM serves
  // LoRA adapters under their own names.
  int64_t adapter_for(const json& b, std::string& name) const {
    name = options.model_name;
    if (!b.contains("model") || b["model"].is_null()) return 0;
    if (!b["model"].is_string()) throw ApiError{400, "model must be a string", "model"};
    name = b["model"].get<std::string>();
    if (name == options.model_name) return 0;
    for (size_t i = 0; i < options.adapter_names.size(); ++i)
      if (options.adapter_names[i] == name) return static_cast<int64_t>(i) + 1;
    std::string served = "'" + options.model_name + "'";
    for (const auto& a : options.adapter_names) served += ", '" + a + "'";
    throw ApiError{404, "The model '" + name + "' does not exist (this server serves " + served + ")", "model",
                   "invalid_request_error", "model_not_found"};
  }

  static json parse_body(const httplib::Request& req) {
    if (size_t bad = first_invalid_utf8(req.body); bad != std::string::npos) {
      const std::string field = field_at(req.body, bad);
      throw ApiError{400,
                     "request body is not valid UTF-8 (byte " + std::to_string(bad) +
                         (field.empty() ? std::string(")") : ", in the value of \"" + field + "\")"),
                     field};
    }
    json b;
    try {
      b = json::parse(req.body);
    } catch (const std::exception& e) {
      throw ApiError{400, std::string("request body is not valid JSON: ") + e.what()};
    }
    if (!b.is_object()) throw ApiError{400, "request body must be a JSON object"};
    return b;
  }

  std::vector<int64_t> chat_prompt(const json& b) const {
    if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
      throw ApiError{400, "messages must be a non-empty array", "messages"};
    // The model's own chat template, when it ships one (tools pass through to it).
    if (!tok->chat_template().empty()) {
      const auto messages = nlohmann::ordered_json::parse(b["messages"].dump());
      const auto tools = b.contains("tools") ? nlohmann::ordered_json::parse(b["tools"].dump()) : nlohmann::ordered_json();
      try {
        return text::encode_chat(*tok, messages, /*add_generation_prompt=*/true, tools);
      } catch (const std::exception& e) {
        throw ApiError{400, error_text(e), "messages"};
      }
    }
    std::string system;
    std::vector<std::pair<std::string, std::string>> turns;  // (role, content)
    for (const auto& m : b["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        throw ApiError{400, "each message needs a string role and a string content", "messages"};
      auto role = m["role"].get<std::string>();
      auto content = m["content"].get<std::string>();
      if (role == "system" || role == "developer") system += content;
      else if (role == "user" || role == "assistant") turns.push_back({role, content});
      else throw ApiError{400, "unknown message role '" + role + "' (system, user, assistant)", "messages"};
    }
    if (turns.empty() || turns.back().first != "user")
      throw ApiError{400, "the last message must come from the user", "messages"};
    // LLaMA-2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>...
    std::vector<int64_t> ids;
    bool first_user = true;
    for (const auto& [role, content] : turns) {
      if (role == "user") {
        std::string text = content;
        if (first_user && !system.empty()) text = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + text;
        first_user = false;
        auto t = tok->encode_with("[INST] " + text + " [/INST]", true, false);
        ids.insert(ids.end(), t.begin(), t.end());
      } else {
        auto t = tok->encode_with(content, false, true);
        ids.insert(ids.end(), t.begin(), t.end());
      }
    }
    return ids;
  }

  // ---- responses

  json usage(int64_t prompt, int64_t completion) const {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  static const char* finish_reason(FinishReason r) {
    return r == FinishReason::kLength ? "length" : r == FinishReason::kError ? "error" : "stop";
  }

  static constexpr int64_t kMaxChoices = 64;  // "n" per request

  // Choices 1 .. n-1 of a request (called on the engine thread with choice 0's first event):
  // the same prompt and parameters, each seeded request's seed + i so the choices differ.
  void add_choices(const Fanout& f, Channel& channel) {
    for (int64_t i = 1; i < f.n; ++i) {
      inference::GenerationRequest q = f.request;
      if (q.params.seed) q.params.seed = *q.params.seed + static_cast<uint64_t>(i);
      std::lock_guard<std::mutex> lock(channel.mu);
      if (channel.closed) return;  // the client left before they started
      try {
        channel.ids.push_back(engine.add(std::move(q)));
      } catch (const std::exception& e) {  // (choice 0 passed the same checks: not expected)
        TokenEvent failed;
        failed.request_id = -i;
        failed.finished = true;
        failed.reason = FinishReason::kError;
        failed.error = error_text(e);
        channel.ids.push_back(failed.request_id);
        channel.events.push_back(failed);
        channel.cv.notify_all();
      }
    }
  }

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    if (stopping.load()) {
      res.status = 503;
      res.set_content(to_text(error_body({503, "the server is shutting down", "", "server_error"})), "application/json");
      count(endpoint, 503);
      return;
    }
    json b;
    inference::GenerationRequest r;
    bool stream = false;
    int64_t id = 0, n = 1;
    auto channel = std::make_shared<Channel>();
    auto fan = std::make_shared<Fanout>();
    try {
      b = parse_body(req);
      r.adapter = adapter_for(b, channel->model);
      r.params = sampling(b);
      n = number<int64_t>(b, "n", 1, 1, kMaxChoices);
      if (b.contains("stream") && !b["stream"].is_null()) {
        if (!b["stream"].is_boolean()) throw ApiError{400, "stream must be a boolean", "stream"};
        stream = b["stream"].get<bool>();
      }
      if (chat) {
        r.prompt = chat_prompt(b);
      } else {
        if (!b.contains("prompt")) throw ApiError{400, "prompt is required", "prompt"};
        const auto& p = b["prompt"];
        std::string text;
        if (p.is_string()) text = p.get<std::string>();
        else if (p.is_array() && p.size() == 1 && p[0].is_string()) text = p[0].get<std::string>();
        else throw ApiError{400, "prompt must be a string (or an array of one string)", "prompt"};
        r.prompt = tok->encode(text, true);
      }
      std::weak_ptr<Fanout> weak_fan = fan;  // (the request it holds carries this callback)
      r.on_event = [this, channel, weak_fan](const TokenEvent& e) {
        {
          std::lock_guard<std::mutex> lock(channel->mu);
          channel->events.push_back(e);
          channel->cv.notify_all();
        }
        auto f = weak_fan.lock();
        if (f && f->n > 1 && !f->started.exchange(true)) add_choices(*f, *channel);
      };
      fan->n = n;
      fan->request = r;
      try {
        id = engine.add(r);
        std::lock_guard<std::mutex> lock(channel->mu);
        channel->ids.push_back(id);
      } catch (const std::exception& e) {
        std::string what = error_text(e);
        throw ApiError{400, what, chat ? "messages" : "prompt", "invalid_request_error",
                       what.find("prompt") != std::string::npos ? "context_length_exceeded" : ""};
      }
    } catch (const ApiError& e) {
      res.status = e.status;
      res.set_content(to_text(error_body(e)), "application/json");
      count(endpoint, e.status);
      return;
    }
    in_flight.fetch_add(1);
    wake.notify_all();
    count(endpoint, 200);
    const int64_t prompt_tokens = static_cast<int64_t>(r.prompt.size());
    const std::string rid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
    const int64_t created = static_cast<int64_t>(unix_now());
    const bool want_logprobs = r.params.logprobs;
    auto* self = this;

    // Both kinds of response are written as the engine produces events, so a client that goes
    // away is noticed (the write fails) and its requests cancelled.
    auto releaser = [self, channel, fan](bool success) {
      std::vector<int64_t> ids;
      {
        std::lock_guard<std::mutex> lock(channel->mu);
        channel->closed = true;
        ids = channel->ids;
      }
      if (!success)
        for (int64_t i : ids) self->engine.cancel(i);
      self->in_flight.fetch_sub(1);
      self->wake.notify_all();
    };
    if (stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [self, channel, rid, created, chat, prompt_tokens, want_logprobs, n](size_t, httplib::DataSink& sink) {
            std::vector<uint8_t> first(static_cast<size_t>(n), 1);
            int64_t completion = 0, finished = 0;
            for (;;) {
              TokenEvent e;
              if (!next_event(*channel, sink, ": keep-alive\n\n", e)) return false;  // an SSE comment
              const int64_t index = channel->choice_of(e.request_id);
              if (!e.finished) ++completion;
              else ++finished;
              // A token that completed no text yet (part of a character) is sent with the next.
              if (!e.finished && e.text.empty() && !want_logprobs) continue;
              json choice = {{"index", index},
                             {"finish_reason", e.finished ? json(finish_reason(e.reason)) : json(nullptr)}};
              if (chat) {
                json delta = json::object();
                if (first[static_cast<size_t>(index)]) delta["role"] = "assistant";
                if (!e.text.empty() || !e.finished) delta["content"] = e.text;
                choice["delta"] = delta;
              } else {
                choice["text"] = e.text;
                choice["logprobs"] = want_logprobs && !e.finished
                                         ? json{{"tokens", {self->piece(e.token)}}, {"token_logprobs", {e.logprob}}}
                                         : json(nullptr);
              }
              first[static_cast<size_t>(index)] = 0;
              json chunk = {{"id", rid},
                            {"object", chat ? "chat.completion.chunk" : "text_completion"},
                            {"created", created},
                            {"model", channel->model},
                            {"choices", {choice}}};
              const bool last = finished == n;
              if (last) chunk["usage"] = self->usage(prompt_tokens, completion);
              std::string line = "data: " + to_text(chunk) + "\n\n";
              if (!sink.write(line.data(), line.size())) return false;
              if (last) {
                static const std::string done = "data: [DONE]\n\n";
                if (!sink.write(done.data(), done.size())) return false;
                sink.done();
                return true;
              }
            }
          },
          releaser);
      return;
    }
    res.set_chunked_content_provider(
        "application/json",
        [self, channel, rid, created, chat, prompt_tokens, want_logprobs, n](size_t, httplib::DataSink& sink) {
          struct Choice {
            std::string text;
            std::vector<std::string> pieces;
            std::vector<double> logprobs;
            json done;  // the finished choice
          };
          std::vector<Choice> out(static_cast<size_t>(n));
          int64_t finished = 0, completion = 0;
          while (finished < n) {
            TokenEvent e;
            if (!next_event(*channel, sink, " ", e)) return false;  // whitespace before JSON is valid
            const int64_t index = channel->choice_of(e.request_id);
            auto& c = out[static_cast<size_t>(index)];
            c.text += e.text;
            if (!e.finished) {
              c.pieces.push_back(self->piece(e.token));
              c.logprobs.push_back(e.logprob);
              continue;
            }
            ++finished;
            completion += static_cast<int64_t>(c.pieces.size());
            json choice = {{"index", index}, {"finish_reason", finish_reason(e.reason)}};
            if (!e.error.empty()) choice["error"] = e.error;
            if (chat) {
              choice["message"] = {{"role", "assistant"}, {"content", c.text}};
            } else {
              choice["text"] = c.text;
              choice["logprobs"] =
                  want_logprobs ? json{{"tokens", c.pieces}, {"token_logprobs", c.logprobs}} : json(nullptr);
            }
            c.done = std::move(choice);
          }
          json choices = json::array();
          for (auto& c : out) choices.push_back(std::move(c.done));
          json body = {{"id", rid},
                       {"object", chat ? "chat.completion" : "text_completion"},
                       {"created", created},
                       {"model", channel->model},
                       {"choices", choices},
                       {"usage", self->usage(prompt_tokens, completion)}};
          std::string s = to_text(body);
          if (!sink.write(s.data(), s.size())) return false;
          sink.done();
          return true;
        },
        releaser);
  }

  std::string metrics_text() {
    std::lock_guard<std::mutex> lock(metrics_mu);
    std::ostringstream o;
    o << "# HELP colossal_requests_total HTTP generation requests by endpoint and status\n"
         "# TYPE colossal_requests_total counter\n";
    for (const auto& [k, v] : requests) o << "colossal_requests_total{endpoint=\"" << k << "\"} " << v << '\n';
    o << "# HELP colossal_prompt_tokens_total Prompt tokens of finished requests\n"
         "# TYPE colossal_prompt_tokens_total counter\ncolossal_prompt_tokens_total "
      << prompt_tokens << "\n# HELP colossal_generation_tokens_total Tokens generated for finished requests\n"
         "# TYPE colossal_generation_tokens_total counter\ncolossal_generation_tokens_total "
      << generation_tokens << '\n';
    ttft.write(o, "colossal_time_to_first_token_seconds", "Time from arrival to the first generated token");
    latency.write(o, "colossal_request_latency_seconds", "Time from arrival to the last token");
    o << "# HELP colossal_kv_blocks_used KV cache blocks in use\n# TYPE colossal_kv_blocks_used gauge\n"
         "colossal_kv_blocks_used "
      << stats.blocks_used << "\n# HELP colossal_kv_blocks_total KV cache blocks in the pool\n"
         "# TYPE colossal_kv_blocks_total gauge\ncolossal_kv_blocks_total "
      << stats.blocks_total << "\n# HELP colossal_requests_running Sequences in the running batch\n"
         "# TYPE colossal_requests_running gauge\ncolossal_requests_running "
      << stats.running << "\n# HELP colossal_requests_waiting Sequences waiting for the batch\n"
         "# TYPE colossal_requests_waiting gauge\ncolossal_requests_waiting "
      << stats.waiting << "\n# HELP colossal_preemptions_total Sequences preempted for lack of KV blocks\n"
         "# TYPE colossal_preemptions_total counter\ncolossal_preemptions_total "
      << stats.preemptions
      << "\n# HELP colossal_spec_draft_tokens_total Tokens the draft model proposed (speculative decoding)\n"
         "# TYPE colossal_spec_draft_tokens_total counter\ncolossal_spec_draft_tokens_total "
      << stats.draft_tokens
      << "\n# HELP colossal_spec_accepted_tokens_total Proposed tokens the model kept\n"
         "# TYPE colossal_spec_accepted_tokens_total counter\ncolossal_spec_accepted_tokens_total "
      << stats.accepted_draft_tokens
      << "\n# HELP colossal_spec_acceptance_rate Kept over proposed tokens since the start (0 without a draft)\n"
         "# TYPE colossal_spec_acceptance_rate gauge\ncolossal_spec_acceptance_rate "
      << stats.acceptance_rate()
      << "\n# HELP colossal_prefix_cache_queries_total Prompt tokens looked up in the prefix cache\n"
         "# TYPE colossal_prefix_cache_queries_total counter\ncolossal_prefix_cache_queries_total "
      << stats.prefix_cache_queries
      << "\n# HELP colossal_prefix_cache_hits_total Prompt tokens served from cached blocks (not prefilled)\n"
         "# TYPE colossal_prefix_cache_hits_total counter\ncolossal_prefix_cache_hits_total "
      << stats.prefix_cache_hits
      << "\n# HELP colossal_prefix_cache_blocks KV blocks registered in the prefix cache (held or evictable)\n"
         "# TYPE colossal_prefix_cache_blocks gauge\ncolossal_prefix_cache_blocks "
      << stats.cached_blocks << '\n';
    return o.str();
  }
};

OpenAIServer::OpenAIServer(inference::Engine& engine, std::shared_ptr<const text::Tokenizer> tokenizer,
                           ServerOptions options)
    : state_(std::make_unique<State>(engine, std::move(tokenizer), std::move(options))) {
  auto* s = state_.get();
  int threads = s->options.http_threads;
  s->svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s->svr.Post("/v1/completions", [s](const httplib::Request& q, httplib::Response& r) { s->handle_generate(q, r, false); });
  s->svr.Post("/v1/chat/completions",
              [s](const httplib::Request& q, httplib::Response& r) { s->handle_generate(q, r, true); });
  s->svr.Get("/v1/models", [s](const httplib::Request&, httplib::Response& r) {
    json data = json::array();
    data.push_back({{"id", s->options.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "colossal-cpp"}});
    for (const auto& a : s->options.adapter_names)  // LoRA adapters name their base as their parent (as vLLM)
      data.push_back({{"id", a}, {"object", "model"}, {"created", 0}, {"owned_by", "colossal-cpp"},
                      {"parent", s->options.model_name}});
    json body = {{"object", "list"}, {"data", data}};
    r.set_content(to_text(body), "application/json");
  });
  s->svr.Get("/health", [s](const httplib::Request&, httplib::Response& r) {
    if (s->stopping.load()) {
      r.status = 503;
      r.set_content("{\"status\":\"stopping\"}", "application/json");
    } else {
      r.set_content("{\"status\":\"ok\"}", "application/json");
    }
  });
  s->svr.Get("/metrics", [s](const httplib::Request&, httplib::Response& r) {
    r.set_content(s->metrics_text(), "text/plain; version=0.0.4");
  });
  // The right method on the wrong path is a 404; the wrong method on a known path a 405.
  auto wrong_method = [](const char* allowed) {
    return [allowed](const httplib::Request& q, httplib::Response& r) {
      r.status = 405;
      r.set_header("Allow", allowed);
      r.set_content(to_text(error_body({405, q.method + " is not allowed on " + q.path + " (use " + allowed + ")"})),
                    "application/json");
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    s->svr.Get(path, wrong_method("POST"));
    s->svr.Put(path, wrong_method("POST"));
    s->svr.Delete(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    s->svr.Post(path, wrong_method("GET"));
    s->svr.Put(path, wrong_method("GET"));
    s->svr.Delete(path, wrong_method("GET"));
  }
  s->svr.set_payload_max_length(static_cast<size_t>(s->options.max_body_bytes));
  const auto read_timeout = std::chrono::milliseconds(static_cast<int64_t>(s->options.read_timeout_s * 1000));
  s->svr.set_read_timeout(read_timeout);
  s->svr.set_keep_alive_timeout(std::max<time_t>(1, static_cast<time_t>(s->options.read_timeout_s)));
  s->svr.set_error_handler([s](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    std::string message = r.status == 413 ? "request body is larger than the limit of " +
                                                std::to_string(s->options.max_body_bytes) + " bytes (--max_body_mib)"
                          : r.status == 404 ? "no route for " + q.method + " " + q.path
                                            : "the request could not be read (" + std::to_string(r.status) + ")";
    r.set_content(to_text(error_body({r.status, message})), "application/json");
  });
  s->svr.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = error_text(e);
    } catch (...) {
    }
    COLOSSAL_LOG_ERROR("[serve] internal error: ", what);
    r.status = 500;
    r.set_content(to_text(error_body({500, "internal error: " + what, "", "server_error"})), "application/json");
  });
}

OpenAIServer::~OpenAIServer() {
  state_->quit.store(true);
  state_->wake.notify_all();
  if (state_->engine_thread.joinable()) state_->engine_thread.join();
}

void OpenAIServer::serve() {
  auto* s = state_.get();
  s->engine_thread = std::thread([s] { s->engine_loop(); });
  COLOSSAL_CHECK(s->svr.bind_to_port(s->options.host.c_str(), s->options.port), "[serve] cannot listen on ",
                 s->options.host, ":", s->options.port, " (in use, or not an address of this machine)");
  std::fprintf(stderr, "[infer_llama] serving '%s' on http://%s:%d (OpenAI API: /v1/completions, /v1/chat/completions)\n",
               s->options.model_name.c_str(), s->options.host.c_str(), s->options.port);
  std::promise<void> done;
  auto listening = done.get_future();
  std::thread listener([s, &done] {
    s->svr.listen_after_bind();  // returns once stop() closed the socket and every connection ended
    done.set_value();
    s->stop_requested.store(true);  // also when listening failed on its own
    s->wake.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(s->wake_mu);
    while (!s->stop_requested.load()) s->wake.wait_for(lock, std::chrono::milliseconds(100));
  }
  // Connections still open a grace period after stop() (idle keep-alive, a client trickling its
  // headers) are closed from our side so the listener's workers see end-of-file and finish.
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(s->options.shutdown_grace_s * 1000));
  if (listening.wait_for(grace) != std::future_status::ready) {
    int closed = close_connections_on_port(s->options.port);
    std::fprintf(stderr, "[infer_llama] closed %d connection(s) still open %.0f s after the stop\n", closed,
                 s->options.shutdown_grace_s);
  }
  listener.join();
  s->quit.store(true);
  s->wake.notify_all();
  s->engine_thread.join();
}

void OpenAIServer::stop() {
  auto* s = state_.get();
  s->stopping.store(true);
  // Drain: in-flight requests finish (their clients get the whole answer), then stop listening.
  while (s->in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  s->svr.stop();
  s->stop_requested.store(true);
  s->wake.notify_all();
}

}  // namespace colossal::llama_app
