#include "core/dist/collectives.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collective_check.h"
#include "core/dist/comm_profile.h"
#include "core/dist/monitor.h"
#include "core/dist/runtime_internal.h"
#include "core/dist/shm_transport.h"

namespace colossal::dist {

struct Handle::State {
  detail::GroupState* group = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  const char* op = "";
  uint64_t seq = 0;
  std::chrono::steady_clock::time_point start;
  bool blocking = false;                           // a synchronous call: nothing could hide it
  std::function<void()> finish;  // post-processing after success (e.g. divide for kAvg)
  bool point_to_point = false;
  // For the communication profiler (comm_profile.h), only when it is on: the bytes this rank
  // hands over, and when the transport reported completion (0: unknown, use the wait's end).
  int64_t bytes = 0;
  std::shared_ptr<std::atomic<int64_t>> completed_ns;
};

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // Gloo has no AVG: sum, then divide (see finish)
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

double elapsed_s(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

[[noreturn]] void fail(Handle::State& s, const std::string& what) {
  detail::GroupState& g = *s.group;
  g.broken.store(true);
  double waited = elapsed_s(s.start);
  Monitor* mon = detail::monitor();
  std::string diagnosis =
      mon ? mon->diagnose(g, s.point_to_point ? std::nullopt : std::optional<uint64_t>(s.seq))
          : "no monitor (dist not initialised)";
  std::string msg = c10::str("[dist] ", s.op, " #", s.seq, " on group '", g.name, "' (",
                             g.ranks.size(), " ranks: ", format_ranks(g.ranks), ") failed after ",
                             waited, " s: ", diagnosis, ". Cause: ", what);
  if (mon) mon->mark_failed(msg);
  COLOSSAL_FAIL(msg);
}

void check_progress(Handle::State& s, std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds slice, Monitor* mon) {
  detail::GroupState& g = *s.group;
  auto now = std::chrono::steady_clock::now();
  if (now >= deadline) {
    fail(s, c10::str("timed out after ", g.timeout.count() / 1000.0, " s (COLOSSAL_DIST_TIMEOUT)"));
  }
  if (mon && now - s.start > slice) {
    if (mon->find_lost_member(g)) fail(s, "a member was lost while waiting");
  }
}

void wait_on_future(Handle::State& s, const c10::intrusive_ptr<c10::ivalue::Future>& future,
                    std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds slice, Monitor* mon) {
  if (!future->completed()) {
    auto mu = std::make_shared<std::mutex>();
    auto cv = std::make_shared<std::condition_variable>();
    future->addCallback([mu, cv](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(*mu);
      cv->notify_all();
    });
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(*mu);
        auto left = deadline - std::chrono::steady_clock::now();
        cv->wait_for(lock, std::max<std::chrono::steady_clock::duration>(
                               std::chrono::milliseconds(1),
                               std::min<std::chrono::steady_clock::duration>(slice, left)),
                     [&] { return future->completed(); });
      }
      if (future->completed()) break;
      check_progress(s, deadline, slice, mon);
    }
  }
  if (future->hasError()) fail(s, first_line(future->tryRetrieveErrorMessage()));
}

void wait_in_slices(Handle::State& s, std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds slice, Monitor* mon) {
  for (;;) {
    try {
      s.work->wait(slice);
      return;
    } catch (const std::exception& e) {
      // A slice that ran out leaves the work incomplete; anything else is a real error.
      if (s.work->isCompleted()) fail(s, first_line(e.what()));
    }
    check_progress(s, deadline, slice, mon);
  }
}

// Waits for the work; every heartbeat interval checks whether a member is known gone so a dead
// peer ends the wait early instead of after the full timeout.
void wait_state_unprofiled(Handle::State& s) {
  detail::GroupState& g = *s.group;
  auto deadline = s.start + g.timeout;
  Monitor* mon = detail::monitor();
  auto slice = mon ? mon->options().interval : std::chrono::milliseconds(1000);

  if (s.point_to_point) {
    // Send/recv works have no future; Gloo bounds their wait by the timeout itself, and a dead
    // peer is directly connected so its socket error surfaces at once.
    try {
      s.work->wait(g.timeout);
    } catch (const std::exception& e) {
      fail(s, first_line(e.what()));
    }
  } else {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = s.work->getFuture();
    } catch (const c10::Error&) {
      // Some Gloo works (e.g. barrier) have no future: wait on the work in slices instead.
    }
    if (future) {
      wait_on_future(s, future, deadline, slice, mon);
    } else {
      wait_in_slices(s, deadline, slice, mon);
    }
  }
  if (s.finish) s.finish();
}

int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void wait_state(Handle::State& s) {
  if (!comm_profile::enabled()) return wait_state_unprofiled(s);
  const auto wait_begin = std::chrono::steady_clock::now();
  wait_state_unprofiled(s);
  const auto end = std::chrono::steady_clock::now();
  int64_t done_ns = s.completed_ns ? s.completed_ns->load() : 0;
  const double seconds = done_ns > 0 ? (done_ns - steady_ns(s.start)) * 1e-9 : elapsed_s(s.start);
  // Exposed: the time the caller spent blocked in wait(); for a synchronous call, all of it (with
  // nothing between launch and wait there is no compute to hide behind, even when the caller was
  // descheduled in between and its wait found the work done).
  const double exposed = s.blocking ? elapsed_s(s.start) : std::chrono::duration<double>(end - wait_begin).count();
  comm_profile::record(s.group->name, s.op, s.bytes, std::max(seconds, 0.0), exposed);
}

// Collectives are numbered per group (every member counts the same sequence, which is what lets
// the monitor tell who has not arrived); point-to-point calls involve two members only and keep
// their own count.
Handle::State begin(const Group& group, const char* op, bool point_to_point,
                    const std::function<std::string()>& describe_call) {
  detail::GroupState& g = group.state();
  COLOSSAL_CHECK(!g.broken.load(), "[dist] ", op, " on group '", g.name,
                 "': the group is unusable after an earlier failed collective");
  Handle::State s;
  s.group = &g;
  s.op = op;
  s.point_to_point = point_to_point;
  s.start = std::chrono::steady_clock::now();
  if (point_to_point) {
    s.seq = g.next_p2p_seq.fetch_add(1);
  } else {
    s.seq = g.next_seq.fetch_add(1);
    if (Monitor* mon = detail::monitor()) mon->on_enter(g, op, s.seq);
    if (detail::collective_checks_enabled()) {
      const std::string& label = detail::current_collective_label();
      detail::agree_on_collective(group, s.seq,
                                  (describe_call ? describe_call() : std::string(op)) +
                                      (label.empty() ? std::string() : " at '" + label + "'"));
    }
  }
  return s;
}

// Runs the backend call; a synchronous throw (bad arguments, closed transport) is a failure too.
template <typename Fn>
Handle::State launch(const Group& group, const char* op, Fn&& call, bool point_to_point = false,
                     const std::function<std::string()>& describe_call = nullptr) {
  Handle::State s = begin(group, op, point_to_point, describe_call);
  try {
    s.work = call(*group.backend());
  } catch (const c10::Error& e) {
    // Our own argument checks pass through unchanged; anything the backend throws while
    // launching is a failed collective (diagnosed, group marked broken).
    if (std::string(e.what()).find("[dist]") != std::string::npos) throw;
    fail(s, first_line(e.what_without_backtrace()));
  }
  if (comm_profile::enabled() && !point_to_point) {
    // The transport's completion time, so a call that finished long before its wait is not
    // charged for the compute in between.
    try {
      if (auto future = s.work->getFuture()) {
        auto done = std::make_shared<std::atomic<int64_t>>(0);
        future->addCallback([done](c10::ivalue::Future&) { done->store(steady_ns(std::chrono::steady_clock::now())); });
        s.completed_ns = done;
      }
    } catch (const c10::Error&) {
      // No future (e.g. Gloo's barrier): the end of the wait stands for completion.
    }
  }
  return s;
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

// "[4, 8] Float": what members must agree on for a tensor argument.
std::string shape_of(const at::Tensor& t) { return c10::str(t.sizes(), " ", t.scalar_type()); }

void check_dense(const at::Tensor& t, const char* op, const char* which) {
  COLOSSAL_CHECK(t.defined(), "[dist] ", op, ": ", which, " tensor is undefined");
  COLOSSAL_CHECK(t.is_contiguous(), "[dist] ", op, ": ", which,
                 " tensor must be contiguous (call .contiguous())");
}

std::vector<int64_t> even_splits(int64_t rows, int size, const char* op, const char* which) {
  COLOSSAL_CHECK(rows % size == 0, "[dist] ", op, ": ", which, " has ", rows,
                 " rows, not divisible by the group size ", size, "; pass explicit splits");
  return std::vector<int64_t>(size, rows / size);
}

// A shared-memory collective seen as c10d work: its future is what the waiting code uses.
class ShmWork : public c10d::Work {
 public:
  explicit ShmWork(c10::intrusive_ptr<c10::ivalue::Future> future) : future_(std::move(future)) {}
  bool isCompleted() override { return future_->completed(); }
  bool wait(std::chrono::milliseconds timeout) override {
    (void)timeout;  // callers wait on the future, in slices, with their own deadline
    future_->wait();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The group's shared-memory transport when it can carry these tensors, else null.
detail::ShmTransport* shm_for(const Group& group, std::initializer_list<const at::Tensor*> tensors) {
  detail::ShmTransport* shm = group.state().shm.get();
  if (!shm) return nullptr;
  for (const at::Tensor* t : tensors)
    if (!detail::ShmTransport::supports(*t)) return nullptr;
  return shm;
}

bool sums(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAvg; }

// A group of one member: the collective is its own input (sum, average, max of one value; a
// gather of one piece), done here with at most a copy instead of a round through the transport
// (a one-rank ZeRO-3 step all-gathers every chunk onto itself).
c10::intrusive_ptr<c10d::Work> done_locally() {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
  future->markCompleted(c10::IValue());
  return c10::make_intrusive<ShmWork>(std::move(future));
}

}  // namespace

struct HandleAccess {
  static Handle make(Handle::State s) { return Handle(std::make_unique<Handle::State>(std::move(s))); }
  // The synchronous calls: launched and waited with nothing in between, so for the profiler the
  // whole call is exposed (a wait that finds the work already done after the caller was
  // descheduled hid nothing).
  static void wait_blocking(Handle h) {
    if (h.state_) h.state_->blocking = true;
    h.wait();
  }
};

Handle::Handle() = default;
Handle::Handle(Handle&&) noexcept = default;
Handle::Handle(std::unique_ptr<State> s) : state_(std::move(s)) {}
Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (state_) {
      try {
        wait();
      } catch (const std::exception& e) {
        COLOSSAL_LOG_ERROR(error_text(e));
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}
Handle::~Handle() {
  if (!state_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    COLOSSAL_LOG_ERROR(error_text(e));
  }
}
void Handle::wait() {
  if (!state_) return;
  auto s = std::move(state_);
  wait_state(*s);
}

Handle all_reduce_async(at::Tensor& tensor, const Group& group, ReduceOp op) {
  check_dense(tensor, "all_reduce", "the");
  bool averaged = false;  // by the transport itself
  auto s = launch(group, "all_reduce", [&](c10d::Backend& b) -> c10::intrusive_ptr<c10d::Work> {
    if (group.size() == 1) return done_locally();
    if (auto* shm = sums(op) ? shm_for(group, {&tensor}) : nullptr) {
      averaged = op == ReduceOp::kAvg;
      return c10::make_intrusive<ShmWork>(shm->all_reduce(tensor, averaged));
    }
    std::vector<at::Tensor> ts{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    o.timeout = group.timeout();
    return b.allreduce(ts, o);
  }, false, [&] { return c10::str("all_reduce(", reduce_name(op), ") ", shape_of(tensor)); });
  s.bytes = static_cast<int64_t>(tensor.nbytes());
  if (op == ReduceOp::kAvg && !averaged && group.size() > 1) {
    int n = group.size();
    s.finish = [tensor, n]() mutable { tensor.div_(n); };
  }
  return HandleAccess::make(std::move(s));
}
namespace {
// NCCL moves only device memory: host tensors (flags, counts, losses, seeds) given to a
// synchronous collective on an NCCL group ride through the current GPU and back.
bool staged_through_device(const at::Tensor& t, const Group& group) {
  return !t.is_cuda() && group.is_member() && group.backend()->getBackendName() == "nccl";
}
}  // namespace

void all_reduce(at::Tensor& tensor, const Group& group, ReduceOp op) {
  if (staged_through_device(tensor, group)) {
    auto d = tensor.to(at::kCUDA);
    HandleAccess::wait_blocking(all_reduce_async(d, group, op));
    tensor.copy_(d);
    return;
  }
  HandleAccess::wait_blocking(all_reduce_async(tensor, group, op));
}

Handle reduce_scatter_async(at::Tensor& output, const at::Tensor& input, const Group& group,
                            ReduceOp op) {
  check_dense(output, "reduce_scatter", "output");
  check_dense(input, "reduce_scatter", "input");
  COLOSSAL_CHECK(input.numel() == output.numel() * group.size(), "[dist] reduce_scatter: input has ",
                 input.numel(), " elements, expected output (", output.numel(), ") x group size (",
                 group.size(), ") = ", output.numel() * group.size());
  COLOSSAL_CHECK(input.scalar_type() == output.scalar_type(), "[dist] reduce_scatter: input is ",
                 input.scalar_type(), " but output is ", output.scalar_type());
  bool averaged = false;  // by the transport itself
  auto s = launch(group, "reduce_scatter", [&](c10d::Backend& b) -> c10::intrusive_ptr<c10d::Work> {
    at::Tensor in = input.view({-1});
    at::Tensor out = output.view({-1});
    if (group.size() == 1) {
      if (in.data_ptr() != out.data_ptr()) out.copy_(in);
      return done_locally();
    }
    if (auto* shm = sums(op) ? shm_for(group, {&in, &out}) : nullptr) {
      averaged = op == ReduceOp::kAvg;
      return c10::make_intrusive<ShmWork>(shm->reduce_scatter(out, in, averaged));
    }
    c10d::ReduceScatterOptions o;
    o.reduceOp = to_c10d(op);
    o.timeout = group.timeout();
    return b._reduce_scatter_base(out, in, o);
  }, false, [&] { return c10::str("reduce_scatter(", reduce_name(op), ") ", shape_of(input), " -> ", output.sizes()); });
  s.bytes = static_cast<int64_t>(input.nbytes());
  if (op == ReduceOp::kAvg && !averaged && group.size() > 1) {
    int n = group.size();
    s.finish = [output, n]() mutable { output.div_(n); };
  }
  return HandleAccess::make(std::move(s));
}
void reduce_scatter(at::Tensor& output, const at::Tensor& input, const Group& group, ReduceOp op) {
  HandleAccess::wait_blocking(reduce_scatter_async(output, input, group, op));
}

Handle all_gather_async(at::Tensor& output, const at::Tensor& input, const Group& group) {
  check_dense(output, "all_gather", "output");
  check_dense(input, "all_gather", "input");
  COLOSSAL_CHECK(output.numel() == input.numel() * group.size(), "[dist] all_gather: output has ",
                 output.numel(), " elements, expected input (", input.numel(), ") x group size (",
                 group.size(), ") = ", input.numel() * group.size());
  COLOSSAL_CHECK(input.scalar_type() == output.scalar_type(), "[dist] all_gather: input is ",
                 input.scalar_type(), " but output is ", output.scalar_type());
  auto s = launch(group, "all_gather", [&](c10d::Backend& b) -> c10::intrusive_ptr<c10d::Work> {
    at::Tensor in = input.view({-1});
    at::Tensor out = output.view({-1});
    if (group.size() == 1) {
      if (in.data_ptr() != out.data_ptr()) out.copy_(in);
      return done_locally();
    }
    if (auto* shm = shm_for(group, {&in, &out})) return c10::make_intrusive<ShmWork>(shm->all_gather(out, in));
    c10d::AllgatherOptions o;
    o.timeout = group.timeout();
    return b._allgather_base(out, in, o);
  }, false, [&] { return c10::str("all_gather ", shape_of(input), " -> ", output.sizes()); });
  s.bytes = static_cast<int64_t>(output.nbytes());
  return HandleAccess::make(std::move(s));
}
void all_gather(at::Tensor& output, const at::Tensor& input, const Group& group) {
  HandleAccess::wait_blocking(all_gather_async(output, input, group));
}

std::string broadcast_text(const std::string& text, int src, const Group& group) {
  auto length = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  broadcast(length, src, group);
  auto buffer = at::empty({length.item<int64_t>()}, at::kByte);
  if (group.rank() == src && !text.empty()) std::memcpy(buffer.data_ptr(), text.data(), text.size());
  if (buffer.numel() > 0) broadcast(buffer, src, group);
  return std::string(static_cast<const char*>(buffer.data_ptr()), static_cast<size_t>(buffer.numel()));
}

void broadcast(at::Tensor& tensor, int src, const Group& group) {
  check_dense(tensor, "broadcast", "the");
  if (staged_through_device(tensor, group)) {
    auto d = tensor.to(at::kCUDA);
    broadcast(d, src, group);
    tensor.copy_(d);
    return;
  }
  COLOSSAL_CHECK(src >= 0 && src < group.size(), "[dist] broadcast: source ", src,
                 " is not a rank of ", group.describe());
  auto s = launch(group, "broadcast", [&](c10d::Backend& b) {
    std::vector<at::Tensor> ts{tensor};
    c10d::BroadcastOptions o;
    o.rootRank = src;
    o.timeout = group.timeout();
    return b.broadcast(ts, o);
  }, false, [&] { return c10::str("broadcast(from ", src, ") ", shape_of(tensor)); });
  s.bytes = static_cast<int64_t>(tensor.nbytes());
  HandleAccess::wait_blocking(HandleAccess::make(std::move(s)));
}

void all_to_all(at::Tensor& output, const at::Tensor& input, const Group& group,
                const std::vector<int64_t>& output_splits,
                const std::vector<int64_t>& input_splits) {
  check_dense(output, "all_to_all", "output");
  check_dense(input, "all_to_all", "input");
  int n = group.size();
  auto in_splits = input_splits.empty() ? even_splits(input.size(0), n, "all_to_all", "input")
                                        : input_splits;
  auto out_splits = output_splits.empty()
                        ? even_splits(output.size(0), n, "all_to_all", "output")
                        : output_splits;
  COLOSSAL_CHECK(static_cast<int>(in_splits.size()) == n && static_cast<int>(out_splits.size()) == n,
                 "[dist] all_to_all: expected ", n, " splits (one per rank), got ",
                 in_splits.size(), " input and ", out_splits.size(), " output splits");
  int64_t in_rows = 0, out_rows = 0;
  for (int k = 0; k < n; ++k) {
    COLOSSAL_CHECK(in_splits[k] >= 0 && out_splits[k] >= 0, "[dist] all_to_all: negative split");
    in_rows += in_splits[k];
    out_rows += out_splits[k];
  }
  COLOSSAL_CHECK(in_rows == input.size(0), "[dist] all_to_all: input splits sum to ", in_rows,
                 " rows but the input has ", input.size(0));
  COLOSSAL_CHECK(out_rows == output.size(0), "[dist] all_to_all: output splits sum to ", out_rows,
                 " rows but the output has ", output.size(0));
  auto s = launch(group, "all_to_all", [&](c10d::Backend& b) {
    at::Tensor in = input;
    std::vector<int64_t> ic = in_splits, oc = out_splits;
    c10d::AllToAllOptions o;
    o.timeout = group.timeout();
    return b.alltoall_base(output, in, oc, ic, o);
  }, false, [&] {  // row counts may differ between members; a row's shape and the dtype may not
    return c10::str("all_to_all rows of ", input.sizes().slice(1), " ", input.scalar_type());
  });
  s.bytes = static_cast<int64_t>(input.nbytes());
  HandleAccess::wait_blocking(HandleAccess::make(std::move(s)));
}

Handle send_async(const at::Tensor& tensor, int peer, const Group& group, int tag) {
  check_dense(tensor, "send", "the");
  COLOSSAL_CHECK(peer >= 0 && peer < group.size() && peer != group.rank(), "[dist] send: peer ",
                 peer, " is not another rank of ", group.describe());
  auto s = launch(group, "send", [&](c10d::Backend& b) {
    std::vector<at::Tensor> ts{tensor};
    return b.send(ts, peer, tag);
  }, /*point_to_point=*/true);
  s.bytes = static_cast<int64_t>(tensor.nbytes());
  return HandleAccess::make(std::move(s));
}

void send(const at::Tensor& tensor, int peer, const Group& group, int tag) {
  HandleAccess::wait_blocking(send_async(tensor, peer, group, tag));
}

void recv(at::Tensor& tensor, int peer, const Group& group, int tag) {
  check_dense(tensor, "recv", "the");
  COLOSSAL_CHECK(peer >= 0 && peer < group.size() && peer != group.rank(), "[dist] recv: peer ",
                 peer, " is not another rank of ", group.describe());
  auto s = launch(group, "recv", [&](c10d::Backend& b) {
    std::vector<at::Tensor> ts{tensor};
    return b.recv(ts, peer, tag);
  }, /*point_to_point=*/true);
  s.bytes = static_cast<int64_t>(tensor.nbytes());
  HandleAccess::wait_blocking(HandleAccess::make(std::move(s)));
}

void barrier(const Group& group) {
  auto s = launch(group, "barrier", [&](c10d::Backend& b) {
    c10d::BarrierOptions o;
    o.timeout = group.timeout();
    return b.barrier(o);
  }, false, [] { return std::string("barrier"); });
  HandleAccess::wait_blocking(HandleAccess::make(std::move(s)));
}

}  // namespace colossal::dist
