// train_bert: fine-tune (or train from scratch) a BERT encoder for text classification or masked
// language modelling with any Booster plugin, on one process or many; classify texts with a
// saved model (--predict).
//
// With no arguments it trains the tiny BERT from scratch to tell which of Jane Austen's six novels
// a 64-word passage comes from (Debian's r-cran-janeaustenr, fetched by scripts/setup.sh), with a
// WordPiece vocabulary learnt from the training passages, and writes out/bert/model:
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_bert
//   build/apps/train_bert --pretrained bert-base-uncased/ --data reviews.jsonl --epochs 2 --lr 3e-5
//   build/apps/train_bert --task mlm --data corpus.jsonl --model small
//   build/apps/train_bert --predict "It is a truth universally acknowledged..."   (uses out/bert/model)
#include "apps/bert/train_bert.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "apps/bert/text_data.h"
#include "apps/bert/train_args.h"
#include "apps/common/train_loop.h"
#include "bert/pretrained.h"
#include "core/booster/booster.h"
#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "core/optim/lr_scheduler.h"
#include "llama/corpus.h"
#include "text/hf_tokenizer.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::bert_app::TrainArgs;
using namespace colossal::bert;
using namespace colossal::bert_app;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

double elapsed(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TextData load_data(const TrainArgs& a, const std::vector<std::string>& known_classes) {
  const bool labelled = a.task == "classify";
  if (a.data.empty()) {
    auto d = austen_passages(colossal::llama::default_austen_rdb(), a.passage_words, a.held_out_every);
    if (!labelled) {
      d.train.labels.assign(d.train.texts.size(), -1);
      d.eval.labels.assign(d.eval.texts.size(), -1);
    }
    return d;
  }
  TextData d;
  d.class_names = known_classes;
  d.train = read_jsonl(a.data, labelled, d.class_names);
  if (!a.eval_data.empty()) d.eval = read_jsonl(a.eval_data, labelled, d.class_names);
  else hold_out(d.train, d.eval, a.held_out_every);
  d.description = a.data + ": " + std::to_string(d.train.texts.size()) + " training and " +
                  std::to_string(d.eval.texts.size()) + " held-out texts" +
                  (labelled ? ", " + std::to_string(d.class_names.size()) + " classes" : "");
  return d;
}

// The tokenizer's files (written into every model directory) and the tokenizer itself.
struct TokenizerChoice {
  std::map<std::string, std::string> files;
  std::unique_ptr<colossal::text::HfTokenizer> tok;
  std::string description;
};

TokenizerChoice choose_tokenizer(const TrainArgs& a, const TextData& data) {
  TokenizerChoice out;
  const std::string dir = !a.tokenizer.empty() ? a.tokenizer : a.pretrained;
  if (!dir.empty()) {
    COLOSSAL_CHECK(exists(dir + "/tokenizer.json"), "[bert] no tokenizer.json in '", dir,
                   "' (BERT directories from the Hub carry one; --tokenizer DIR names another)");
    out.tok = colossal::text::HfTokenizer::from_directory(dir);
    out.files = out.tok->files();
    out.description = dir + "/tokenizer.json";
  } else {
    out.files = learn_wordpiece(data.train.texts, a.vocab_size);
    colossal::text::TokenizerConfig config;
    config.pad_token = "[PAD]";
    config.unk_token = "[UNK]";
    out.tok = std::make_unique<colossal::text::HfTokenizer>(out.files.at("tokenizer.json"), "learnt WordPiece", config);
    out.description = "WordPiece learnt from the training texts";
  }
  COLOSSAL_CHECK(out.tok->pad_id() >= 0, "[bert] the tokenizer (", out.description, ") names no padding token");
  return out;
}

// Evaluation: every data-parallel replica scores every n-th text; replicas out of texts repeat
// text 0 with weight 0, so all run the same forwards (ZeRO-3 gathers collectively). Returns
// {loss sum, correct, scored} summed over the replicas.
std::array<double, 3> evaluate(BertForTask& model, const colossal::text::Tokenizer& tok, const LabelledTexts& data,
                               const TrainArgs& a, int replica, int replicas, const dist::Group& group,
                               c10::Device device, int64_t mask_id) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t size = static_cast<int64_t>(data.texts.size()), per_rank = (size + replicas - 1) / replicas;
  double sums[3] = {0, 0, 0};
  for (int64_t start = 0; start < per_rank; start += a.batch_size) {
    std::vector<int64_t> idx;
    std::vector<double> weight;
    for (int64_t k = start; k < std::min(per_rank, start + a.batch_size); ++k) {
      const int64_t i = k * replicas + replica;
      idx.push_back(i < size ? i : 0);
      weight.push_back(i < size ? 1.0 : 0.0);
    }
    auto b = make_batch(tok, data, idx, a.max_length);
    if (model->head() == BertHead::kMaskedLM) {
      mask_tokens(b, idx, a.loop.seed, /*epoch=*/-1, mask_id, model->config().vocab_size, tok);  // fixed masks
      for (size_t k = 0; k < weight.size(); ++k)
        if (weight[k] == 0) b.labels[static_cast<int64_t>(k)].fill_(-100);
    }
    torch::Tensor logits;
    auto ids = b.input_ids.to(device), mask = b.attention_mask.to(device), types = b.token_type_ids.to(device);
    if (model->head() == BertHead::kMaskedLM) {
      auto loss = model->loss(ids, mask, types, b.labels, &logits);
      auto flat = b.labels.reshape({-1});
      auto targets = flat.index_select(0, flat.ne(-100).nonzero().squeeze(1));
      const double n = static_cast<double>(targets.numel());
      sums[0] += loss.item<double>() * n;
      sums[1] += logits.argmax(1).cpu().eq(targets).sum().item<double>();
      sums[2] += n;
    } else {
      logits = model->forward(ids, mask, types).to(torch::kFloat).cpu();
      auto w = torch::tensor(weight, torch::kDouble);
      auto nll = torch::nn::functional::cross_entropy(
          logits, b.labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      sums[0] += (nll.to(torch::kDouble) * w).sum().item<double>();
      sums[1] += (logits.argmax(1).eq(b.labels).to(torch::kDouble) * w).sum().item<double>();
      sums[2] += w.sum().item<double>();
    }
  }
  model->train();
  auto packed = torch::tensor({sums[0], sums[1], sums[2]}, torch::kDouble);
  dist::all_reduce(packed, group);
  return {packed[0].item<double>(), packed[1].item<double>(), packed[2].item<double>()};
}

int predict(const TrainArgs& a) {
  const std::string dir = !a.model_dir.empty() ? a.model_dir : !a.pretrained.empty() ? a.pretrained : a.save_dir + "/model";
  COLOSSAL_CHECK(exists(dir + "/config.json"), "--predict: no model at ", dir, " (train one first, or pass --model_dir DIR)");
  auto loaded = load_pretrained(dir, {.head = BertHead::kSequenceClassification});
  COLOSSAL_CHECK(loaded.new_layers.empty(), "--predict: ", dir, " is not a classifier (it has no ", loaded.new_layers,
                 "); train one with --task classify");
  auto tok = colossal::text::HfTokenizer::from_directory(dir);
  loaded.model->eval();
  torch::NoGradGuard no_grad;
  LabelledTexts texts;
  texts.texts = a.predict;
  texts.labels.assign(a.predict.size(), 0);
  for (size_t i = 0; i < a.predict.size(); ++i) {
    auto b = make_batch(*tok, texts, {static_cast<int64_t>(i)}, a.max_length);
    auto probs = torch::softmax(loaded.model->forward(b.input_ids, b.attention_mask, b.token_type_ids), 1)[0];
    auto [p, c] = probs.max(0);
    const int64_t label = c.item<int64_t>();
    const auto& names = loaded.config.id2label;
    const std::string name = label < static_cast<int64_t>(names.size()) ? names[label] : "LABEL_" + std::to_string(label);
    std::printf("%s\t%.3f\t%s\n", name.c_str(), p.item<double>(), a.predict[i].substr(0, 80).c_str());
  }
  std::fflush(stdout);
  return 0;
}

void train(TrainArgs& a, colossal::apps::RunSummary& summary) {
  colossal::apps::TrainJob job(a.loop, a.plugin);  // the runtime; colossal verify's one-process reference
  job.lock_output(a.save_dir);                     // one job per output, before anything is written there
  a.batch_size *= job.batch_factor();
  auto plugin = booster::make_plugin(a.plugin);
  const auto& dims = plugin->dims();
  const c10::Device device = plugin->device();
  const int r = dist::rank(), replicas = dims.dp();
  colossal::fs::make_dirs(a.save_dir);
  const BertHead head = head_from_string(a.task);

  // The model's shape first (a pretrained model fixes its labels' names), then the data.
  std::optional<BertConfig> pretrained_config;
  if (!a.pretrained.empty()) pretrained_config = BertConfig::from_json_file(a.pretrained + "/config.json");
  auto data = load_data(a, {});
  COLOSSAL_CHECK(!data.train.texts.empty() && !data.eval.texts.empty(), "[data] ", data.description,
                 ": training and evaluation both need texts");
  if (head == BertHead::kSequenceClassification)
    COLOSSAL_CHECK(data.class_names.size() >= 2, "[data] ", data.description, ": expected at least 2 classes");
  auto tokens = choose_tokenizer(a, data);
  const auto& tok = *tokens.tok;
  const auto mask_id = tok.token_to_id("[MASK]");
  COLOSSAL_CHECK(head != BertHead::kMaskedLM || mask_id, "[bert] --task mlm: the tokenizer (", tokens.description,
                 ") has no [MASK] token");

  BertConfig cfg;
  BertForTask model{nullptr};
  std::string description;
  const auto parallel = plugin->parallel_context();
  torch::manual_seed(a.loop.seed);
  const int64_t labels = static_cast<int64_t>(data.class_names.size());
  if (pretrained_config) {
    check_parallel(*pretrained_config, dims.tp(), dims.pp(), dims.sp_mode());
    LoadBertOptions lo{.head = head, .num_labels = head == BertHead::kSequenceClassification ? labels : 0,
                       .id2label = data.class_names};
    auto loaded = load_pretrained(a.pretrained, lo, parallel);
    cfg = loaded.config;
    model = loaded.model;
    description = "from " + a.pretrained + (loaded.new_layers.empty() ? "" : " (new: " + loaded.new_layers + ")");
  } else {
    cfg = a.model.size() > 5 && a.model.substr(a.model.size() - 5) == ".json" ? BertConfig::from_json_file(a.model)
                                                                                : BertConfig::named(a.model, tok.vocab_size());
    cfg.vocab_size = std::max<int64_t>(cfg.vocab_size, tok.vocab_size());
    cfg.pad_token_id = tok.pad_id();
    cfg.max_position_embeddings = std::max(cfg.max_position_embeddings, a.max_length);
    if (head == BertHead::kSequenceClassification) {
      cfg.num_labels = labels;
      cfg.id2label = data.class_names;
    }
    check_parallel(cfg, dims.tp(), dims.pp(), dims.sp_mode());
    // Lazily: no weight exists until boost() makes what this rank keeps, with an eager build's values.
    colossal::nn::DeferredInitGuard deferred;
    model = BertForTask(cfg, head, parallel);
    description = a.model + " from scratch";
  }
  COLOSSAL_CHECK(tok.vocab_size() <= cfg.vocab_size, "[bert] the tokenizer has ", tok.vocab_size(),
                 " tokens but the model's vocabulary ", cfg.vocab_size);
  COLOSSAL_CHECK(a.max_length <= cfg.max_position_embeddings, "--max_length ", a.max_length,
                 " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);
  if (a.dropout >= 0) {
    model->set_dropout(a.dropout);
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = a.dropout;
    cfg.classifier_dropout = -1;
  }
  if (!colossal::nn::has_deferred_parameters(*model)) model->to(device);

  if (r == 0) {
    std::printf("data: %s\n", data.description.c_str());
    std::printf("tokenizer: %s (%ld tokens)\n", tokens.description.c_str(), tok.vocab_size());
    std::printf("model: BERT %s for %s, %.2fM parameters (hidden %ld, layers %ld, heads %ld, vocab %ld)\n",
                description.c_str(), head == BertHead::kMaskedLM ? "masked LM" : "classification",
                (head == BertHead::kMaskedLM ? cfg.masked_lm_parameters() : cfg.classification_parameters()) / 1e6,
                cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.vocab_size);
    std::fflush(stdout);
  }

  colossal::apps::TrainTask task;
  task.name = "train_bert";
  task.plugin = plugin;
  task.model = model.ptr();
  task.optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = a.lr, .weight_decay = a.weight_decay});
  task.schedule = [&](int64_t steps) {
    return colossal::optim::LRScheduler::Options{.kind = "linear",
                                                 .warmup_steps = static_cast<int64_t>(a.warmup_ratio * steps),
                                                 .total_steps = steps, .min_lr_ratio = 0.0};
  };
  task.train_samples = static_cast<int64_t>(data.train.texts.size());
  task.micro_batch = a.batch_size;
  task.epochs = a.epochs;
  task.epoch_period = 1;  // evaluate and save at every epoch's end
  task.batch_flag = "--batch_size " + std::to_string(a.batch_size);
  task.length_flags = "--epochs or --max_steps";
  task.throughput_unit = "texts";
  task.count_metrics = [](const std::map<std::string, double>& counts) {
    return colossal::apps::Metrics{{"acc", counts.at("correct") / std::max(1.0, counts.at("scored"))}};
  };
  const auto replica_group = dims.group(colossal::dist::Axis::kDp);
  const int replica = dims.coord(colossal::dist::Axis::kDp);
  task.loss = [&](colossal::apps::StepContext& ctx) -> torch::Tensor {
    auto b = make_batch(tok, data.train, ctx.positions, a.max_length);
    if (head == BertHead::kMaskedLM)
      mask_tokens(b, ctx.positions, a.loop.seed, ctx.sampler.epoch(), *mask_id, cfg.vocab_size, tok);
    torch::Tensor logits;
    auto loss = model->loss(b.input_ids.to(device), b.attention_mask.to(device), b.token_type_ids.to(device),
                            b.labels.to(device), &logits);
    torch::Tensor targets = b.labels;
    if (head == BertHead::kMaskedLM) {
      auto flat = b.labels.reshape({-1});
      targets = flat.index_select(0, flat.ne(-100).nonzero().squeeze(1));
    }
    ctx.count("correct", logits.detach().argmax(1).cpu().eq(targets).sum().item<double>());
    ctx.count("scored", static_cast<double>(targets.numel()));
    if (head == BertHead::kMaskedLM && replicas > 1) {
      // The mean over every replica's masked tokens (what one process on the whole batch takes),
      // not the mean of the replicas' means: each replica's mean weighted by its share, times
      // the replicas (the gradient is averaged over them).
      const double local = static_cast<double>(targets.numel());
      auto total = torch::tensor({local}, torch::kDouble);
      dist::all_reduce(total, replica_group);
      if (total.item<double>() > 0) loss = loss * (local * replicas / total.item<double>());
    }
    return loss;
  };
  std::optional<std::array<double, 3>> last_eval;
  task.evaluate = [&](const colossal::apps::EvalContext&) -> std::optional<colossal::apps::Metrics> {
    last_eval = evaluate(model, tok, data.eval, a, replica, replicas, replica_group, device, mask_id.value_or(0));
    const auto& e = *last_eval;
    if (e[2] == 0) return std::nullopt;
    return colossal::apps::Metrics{{"loss", e[0] / e[2]}, {"acc", e[1] / e[2]}, {"scored", e[2]}};
  };
  task.eval_samples = static_cast<int64_t>(data.eval.texts.size());
  task.eval_flag = a.eval_data.empty() ? "--held_out_every " + std::to_string(a.held_out_every) : "--eval_data";
  task.checkpoint_dir = a.save_dir + "/checkpoints";
  task.model_files = tokens.files;  // every checkpoint's model/ opens as a model
  task.model_files["config.json"] = cfg.to_json(architecture_of(head));
  const auto t0 = std::chrono::steady_clock::now();
  auto run = job.run(task, summary);
  if (run.recorded) return;
  summary.outputs["model"] = a.save_dir + "/model";
  if (!last_eval) (void)task.evaluate({run.total_steps, run.boosted.compute_dtype, *run.booster, *run.boosted.optimizer});
  auto state = run.boosted.optimizer->model_wrapper().checkpoint().model_state_to_save(*model);
  if (r == 0) {
    const std::string out = a.save_dir + "/model";
    save_pretrained(cfg, head, state, out);
    for (const auto& [name, text] : tokens.files)
      if (name != "config.json") colossal::checkpoint::write_text_atomically(out + "/" + name, text);
    const auto& e = *last_eval;
    std::printf("result: held-out %s accuracy %.2f%% (loss %.4f) on %.0f %s; %.0f s in all (%d replica(s))\n",
                head == BertHead::kMaskedLM ? "masked-token" : "classification", 100 * e[1] / std::max(1.0, e[2]),
                e[0] / std::max(1.0, e[2]), e[2], head == BertHead::kMaskedLM ? "masked tokens" : "texts", elapsed(t0),
                replicas);
    std::printf("saved: %s (config.json, model.safetensors, tokenizer.json, tokenizer_config.json%s)\n", out.c_str(),
                tokens.files.count("vocab.txt") ? ", vocab.txt" : "");
    std::fflush(stdout);
  }
  dist::barrier(dist::world_group());
}

}  // namespace

namespace colossal::bert_app {

colossal::apps::RunSummary train_bert(const std::vector<std::string>& args) {
  return colossal::apps::run_job<TrainArgs>("train_bert", args, &parse_train_args,
                                            [](TrainArgs& a, colossal::apps::RunSummary& summary) {
    if (!a.predict.empty()) summary.exit_code = predict(a);
    else train(a, summary);
  });
}

}  // namespace colossal::bert_app
