#include "graph/zoo.h"

#include <functional>

namespace edgecost::graph {
namespace {

// VGG-16 (Simonyan & Zisserman), as POET builds it: conv3x3+ReLU stacks, 2x2 max pools,
// three fully connected layers with dropout.
ForwardGraph Vgg16(std::string model, int batch, int64_t classes, int64_t image) {
  ForwardGraph g(std::move(model), batch);
  int x = g.Input({batch, 3, image, image});
  int64_t channels = 3;
  const std::vector<std::vector<int64_t>> stages = {
      {64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}};
  for (const auto& stage : stages) {
    for (int64_t filters : stage) {
      x = g.Relu(g.Conv2d(x, channels, filters, 3, 1, 1));
      channels = filters;
    }
    x = g.MaxPool2d(x, 2, 2);
  }
  x = g.Flatten(x);
  x = g.Dropout(g.Relu(g.Linear(x, 512 * (image / 32) * (image / 32), 4096)));
  x = g.Dropout(g.Relu(g.Linear(x, 4096, 4096)));
  x = g.Linear(x, 4096, classes);
  g.CrossEntropyLoss(x, classes);
  return g;
}

// ResNet-18 for ImageNet "from the paper": POET's basic block adds relu1 (not the block
// input) to bn2, and has no projection shortcut. Kept as POET has it.
ForwardGraph Resnet18(int batch) {
  ForwardGraph g("resnet18", batch);
  int x = g.Input({batch, 3, 224, 224});
  x = g.BatchNorm2d(g.Conv2d(x, 3, 64, 7, 2, 3));
  x = g.MaxPool2d(x, 3, 2);
  auto block = [&g](int in, int64_t in_planes, int64_t planes, int64_t stride) {
    int relu1 = g.Relu(g.BatchNorm2d(g.Conv2d(in, in_planes, planes, 3, stride, 1)));
    int bn2 = g.BatchNorm2d(g.Conv2d(relu1, planes, planes, 3, 1, 1));
    return g.Relu(g.Add(relu1, bn2));
  };
  const std::vector<std::pair<int64_t, int64_t>> widths = {{64, 64}, {64, 128}, {128, 256}, {256, 512}};
  for (size_t s = 0; s < widths.size(); ++s) {
    x = block(x, widths[s].first, widths[s].second, s == 0 ? 1 : 2);
    x = block(x, widths[s].second, widths[s].second, 1);
  }
  x = g.Flatten(g.AvgPool2d(x, 7, 1));
  x = g.Linear(x, 512, 1000);
  g.CrossEntropyLoss(x, 1000);
  return g;
}

// ResNet-50 as POET builds it: bottleneck blocks whose shortcut adds relu1 to bn3
// (sizes differ; POET zero-pads in its cost model).
ForwardGraph Resnet50(int batch) {
  ForwardGraph g("resnet50", batch);
  int x = g.Input({batch, 3, 224, 224});
  x = g.BatchNorm2d(g.Conv2d(x, 3, 64, 7, 2, 3));
  x = g.MaxPool2d(x, 3, 2);
  auto block = [&g](int in, int64_t in_planes, int64_t mid, int64_t out, int64_t stride) {
    int relu1 = g.Relu(g.BatchNorm2d(g.Conv2d(in, in_planes, mid, 1, stride, 0)));
    int relu2 = g.Relu(g.BatchNorm2d(g.Conv2d(relu1, mid, mid, 3, 1, 1)));
    int bn3 = g.BatchNorm2d(g.Conv2d(relu2, mid, out, 1, 1, 0));
    return g.Relu(g.Add(bn3, relu1));
  };
  struct Stage {
    int64_t mid, out;
    int blocks;
  };
  const Stage stages[] = {{64, 256, 3}, {128, 512, 4}, {256, 1024, 6}, {512, 2048, 3}};
  int64_t in_planes = 64;
  for (size_t s = 0; s < std::size(stages); ++s) {
    for (int b = 0; b < stages[s].blocks; ++b) {
      x = block(x, in_planes, stages[s].mid, stages[s].out, (s > 0 && b == 0) ? 2 : 1);
      in_planes = stages[s].out;
    }
  }
  x = g.Flatten(g.AvgPool2d(x, 7, 1));
  x = g.Linear(x, 2048, 1000);
  g.CrossEntropyLoss(x, 1000);
  return g;
}

// ResNet-18 for CIFAR-10 as POET builds it: every block has a 3x3 convolution shortcut.
ForwardGraph Resnet18Cifar(int batch) {
  ForwardGraph g("resnet18_cifar", batch);
  int x = g.Input({batch, 3, 32, 32});
  x = g.BatchNorm2d(g.Conv2d(x, 3, 16, 3, 1, 1));
  auto block = [&g](int in, int64_t in_planes, int64_t planes, int64_t stride) {
    int relu1 = g.Relu(g.BatchNorm2d(g.Conv2d(in, in_planes, planes, 3, stride, 1)));
    int relu2 = g.Relu(g.BatchNorm2d(g.Conv2d(relu1, planes, planes, 3, 1, 1)));
    int bn3 = g.BatchNorm2d(g.Conv2d(in, in_planes, planes, 3, stride, 1));
    return g.Relu(g.Add(relu2, bn3));
  };
  const std::vector<std::pair<int64_t, int64_t>> widths = {{16, 16}, {16, 32}, {32, 64}};
  for (size_t s = 0; s < widths.size(); ++s) {
    x = block(x, widths[s].first, widths[s].second, s == 0 ? 1 : 2);
    x = block(x, widths[s].second, widths[s].second, 1);
  }
  x = g.Flatten(g.AvgPool2d(x, 8, 1));
  x = g.Linear(x, 64, 10);
  g.CrossEntropyLoss(x, 10);
  return g;
}

// The six-layer MLP on MNIST-sized inputs from POET's linear.py.
ForwardGraph LinearNet(int batch) {
  ForwardGraph g("linear", batch);
  int x = g.Input({batch, 784});
  const std::pair<int64_t, int64_t> dims[] = {{784, 10}, {10, 120}, {120, 100}, {100, 200}, {200, 10}, {10, 10}};
  for (auto [in, out] : dims) x = g.Relu(g.Linear(x, in, out));
  g.CrossEntropyLoss(x, 10);
  return g;
}

// BERT as POET builds it (sequence 512, hidden 768, 12 heads of 64). POET's second
// residual adds the attention projection output (not the first residual sum) to the
// FFN output, and the batch size does not enter its shapes; both kept as POET has them.
ForwardGraph Bert(std::string model, int batch, int blocks) {
  constexpr int64_t kSeq = 512, kHidden = 768, kHeadDim = 64, kHeads = 12;
  ForwardGraph g(std::move(model), batch);
  int x = g.Input({kSeq, kHidden});
  for (int b = 0; b < blocks; ++b) {
    const int block_input = x;
    int qkv = g.QkvProjection(x, kSeq, kHidden, kHeadDim, kHeads);
    int scores = g.AttentionScores(qkv, kSeq, kHeadDim, kHeads);
    int context = g.AttentionContext(scores, kSeq, kHeadDim, kHeads);
    int projection = g.Linear(context, kHeadDim * kHeads, kHidden);
    int residual = g.Add(block_input, projection);
    int ffn = g.Linear(g.LinearRelu(residual, kHidden, 4 * kHidden), 4 * kHidden, kHidden);
    x = g.Add(projection, ffn);
  }
  g.CrossEntropyLoss(x, kSeq);
  return g;
}

struct Entry {
  ZooModel info;
  std::function<ForwardGraph(int)> build;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {{"linear", "6-layer MLP, 784 inputs, 10 classes"}, LinearNet},
      {{"vgg16", "VGG-16, ImageNet 224x224"}, [](int b) { return Vgg16("vgg16", b, 1000, 224); }},
      {{"vgg16_cifar", "VGG-16, CIFAR-10 32x32"}, [](int b) { return Vgg16("vgg16_cifar", b, 10, 32); }},
      {{"resnet18", "ResNet-18, ImageNet 224x224"}, Resnet18},
      {{"resnet50", "ResNet-50, ImageNet 224x224"}, Resnet50},
      {{"resnet18_cifar", "ResNet-18 (CIFAR variant), 32x32"}, Resnet18Cifar},
      {{"bert", "BERT-Base, 12 blocks, sequence 512", /*batched=*/false}, [](int b) { return Bert("bert", b, 12); }},
      {{"transformer", "one BERT-Base block, sequence 512", /*batched=*/false},
       [](int b) { return Bert("transformer", b, 1); }},
  };
  return entries;
}

}  // namespace

const std::vector<ZooModel>& ZooModels() {
  static const std::vector<ZooModel> models = [] {
    std::vector<ZooModel> out;
    for (const Entry& e : Entries()) out.push_back(e.info);
    return out;
  }();
  return models;
}

Result<ForwardGraph> BuildZooModel(std::string_view name, int batch_size) {
  if (batch_size < 1 || batch_size > kMaxBatchSize) {
    return InvalidArgument("batch size must be 1 to " + std::to_string(kMaxBatchSize) + ", not " +
                           std::to_string(batch_size));
  }
  std::string names;
  for (const Entry& e : Entries()) {
    names += (names.empty() ? "" : ", ") + std::string(e.info.name);
    if (e.info.name != name) continue;
    if (!e.info.batched && batch_size != 1) {
      return InvalidArgument(std::string(name) +
                             " has no batch dimension in POET's model (one 512-token "
                             "sequence); use batch size 1");
    }
    return e.build(batch_size);
  }
  return NotFound("no model '" + std::string(name) + "' in the zoo; choose one of " + names);
}

}  // namespace edgecost::graph
