// colossal._C.dist: the process-wide runtime (launch variables of `colossal run`, torchrun or
// SLURM) and the collectives on torch.Tensors, in place. Long calls release the GIL so the
// liveness monitor's and other Python threads keep running.
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::python {
namespace py = pybind11;
namespace {

dist::ReduceOp reduce_op(const std::string& name) {
  if (name == "sum") return dist::ReduceOp::kSum;
  if (name == "avg") return dist::ReduceOp::kAvg;
  if (name == "max") return dist::ReduceOp::kMax;
  if (name == "min") return dist::ReduceOp::kMin;
  if (name == "product") return dist::ReduceOp::kProduct;
  throw py::value_error("unknown reduce op '" + name + "'; expected sum, avg, max, min or product");
}

const dist::Group& group_or_world(const std::optional<dist::Group>& g, dist::Group& world) {
  if (g) return *g;
  world = dist::world_group();
  return world;
}

}  // namespace

void bind_dist(py::module_& parent) {
  auto m = parent.def_submodule("dist", "the distributed runtime and its collectives");
  py::class_<dist::Group>(m, "Group", "a process group: world_group(), new_group(ranks, name)")
      .def_property_readonly("name", &dist::Group::name)
      .def_property_readonly("rank", &dist::Group::rank, "this process's rank in the group")
      .def_property_readonly("size", &dist::Group::size)
      .def_property_readonly("ranks", &dist::Group::ranks, "the members' global ranks")
      .def_property_readonly("is_member", &dist::Group::is_member)
      .def("__repr__", &dist::Group::describe);

  m.def("init", [](double timeout_s, const std::string& backend) {
        auto o = dist::InitOptions::from_environment();
        if (timeout_s > 0) o.timeout_s = timeout_s;
        o.backend = backend;
        py::gil_scoped_release nogil;
        dist::init(o);
      },
      py::arg("timeout_s") = 0.0, py::arg("backend") = "auto",
      "Joins the job described by the launch variables (RANK, WORLD_SIZE, MASTER_ADDR, ...); a world of one without them.");
  m.def("is_initialized", &dist::is_initialized);
  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    dist::shutdown();
  });
  m.def("rank", &dist::rank);
  m.def("world_size", &dist::world_size);
  m.def("local_rank", [] { return dist::environment().local_rank; });
  m.def("local_world_size", [] { return dist::environment().local_world_size; });
  m.def("backend", &dist::backend_name);
  m.def("world_group", &dist::world_group);
  m.def("new_group", [](const std::vector<int>& ranks, const std::string& name) {
        py::gil_scoped_release nogil;
        return dist::new_group(ranks, name);
      },
      py::arg("ranks"), py::arg("name"), "Every member calls it with the same ranks and name.");

  using OptGroup = std::optional<dist::Group>;
  m.def("all_reduce", [](at::Tensor t, const std::string& op, const OptGroup& g) {
        dist::Group world;
        const auto& group = group_or_world(g, world);
        py::gil_scoped_release nogil;
        dist::all_reduce(t, group, reduce_op(op));
      },
      py::arg("tensor"), py::arg("op") = "sum", py::arg("group") = py::none());
  m.def("broadcast", [](at::Tensor t, int src, const OptGroup& g) {
        dist::Group world;
        const auto& group = group_or_world(g, world);
        py::gil_scoped_release nogil;
        dist::broadcast(t, src, group);
      },
      py::arg("tensor"), py::arg("src") = 0, py::arg("group") = py::none());
  m.def("all_gather", [](at::Tensor out, const at::Tensor& in, const OptGroup& g) {
        dist::Group world;
        const auto& group = group_or_world(g, world);
        py::gil_scoped_release nogil;
        dist::all_gather(out, in, group);
      },
      py::arg("output"), py::arg("input"), py::arg("group") = py::none(),
      "output = group size x input elements; chunk r from rank r.");
  m.def("reduce_scatter", [](at::Tensor out, const at::Tensor& in, const std::string& op, const OptGroup& g) {
        dist::Group world;
        const auto& group = group_or_world(g, world);
        py::gil_scoped_release nogil;
        dist::reduce_scatter(out, in, group, reduce_op(op));
      },
      py::arg("output"), py::arg("input"), py::arg("op") = "sum", py::arg("group") = py::none(),
      "input = group size x output elements; rank r receives the reduced chunk r.");
  m.def("barrier", [](const OptGroup& g) {
        dist::Group world;
        const auto& group = group_or_world(g, world);
        py::gil_scoped_release nogil;
        dist::barrier(group);
      },
      py::arg("group") = py::none());
}

}  // namespace colossal::python
