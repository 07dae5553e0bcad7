// The flags that name a training graph, shared by graph, costs and solve.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "graph/resolve.h"

namespace edgecost::cli {

struct GraphFlags {
  std::string model_or_file;
  int batch_size = 1;
  std::string derivation{graph::DerivationName(graph::kDefaultDerivation)};
  std::string trainable = "all";
  CLI::Option* derivation_option = nullptr;  // to tell a default from an explicit choice

  void AddTo(CLI::App* command, bool positional = true) {
    if (positional) {
      command
          ->add_option("model", model_or_file,
                       "Zoo or stored model (see `edgecost models`), ONNX file (.onnx) or graph file (.json)")
          ->required();
    }
    command->add_option("--batch-size", batch_size, "Batch size of zoo models")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    derivation_option =
        command
            ->add_option(
                "--derivation", derivation,
                "Backward graph: exact (what each op's backward really reads) or poet (POET's one gradient per "
                "layer, to compare with POET)")
            ->capture_default_str()
            ->check(CLI::IsMember({"poet", "exact"}));
    AddTrainableOption(command, trainable);
  }

  Result<graph::GraphSpec> Spec() const {
    EC_ASSIGN_OR_RETURN(graph::Derivation d, graph::ParseDerivation(derivation));
    EC_ASSIGN_OR_RETURN(graph::Trainable t, graph::Trainable::Parse(trainable));
    return graph::GraphSpec{model_or_file, batch_size, d, t};
  }
};

}  // namespace edgecost::cli
