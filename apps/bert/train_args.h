#pragma once
// train_bert's settings, each declared once in visit(): the flags, the keys of a YAML/JSON file
// (--config; flags given on the command line win), --help and the range checks all come from
// that list (apps/common/settings.h).
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/train_loop.h"
#include "core/booster/plugin_config.h"
#include "core/common/options.h"

namespace colossal::bert_app {

struct TrainArgs {
  // Task and data
  std::string task = "classify";  // classify | mlm
  std::string data;               // JSON lines {"text", "label"}; empty: the built-in Austen passages
  std::string eval_data;          // held-out JSON lines (default: every --held_out_every-th text of --data)
  int64_t held_out_every = 10;
  int64_t passage_words = 64;     // the Austen passages' length
  int64_t max_length = 128;       // tokens per text, [CLS] and [SEP] included
  // Model
  std::string model = "tiny";     // tiny | mini | small | medium | base | path/to/config.json
  std::string pretrained;         // a Hugging Face BERT directory to fine-tune
  std::string tokenizer;          // a directory with tokenizer.json (default: --pretrained's, else one learnt)
  int64_t vocab_size = 8000;      // the learnt WordPiece vocabulary's size
  double dropout = -1;            // < 0: the config's (0.1 for the named sizes)
  // Optimisation
  int64_t batch_size = 16;        // texts per rank per step
  int64_t epochs = 4;
  // From scratch on the Austen task (tiny, 2 ranks): lr 1e-3 reached 78.4% held-out after one
  // epoch, where 5e-4 (mini) was still at the majority class's 21.9% after 40 steps.
  // Fine-tuning a pretrained BERT wants the usual 2e-5..5e-5.
  double lr = 1e-3, weight_decay = 0.01, warmup_ratio = 0.1;
  // Output
  std::string save_dir = "out/bert";  // checkpoints/ and model/
  // Prediction instead of training
  std::vector<std::string> predict;
  std::string model_dir;          // --predict's model (default SAVE_DIR/model)
  apps::TrainLoopOptions loop{.log_interval = 20};
  booster::PluginConfig plugin;
  std::string config;

  template <class V>
  void visit(V& v) {
    v("task", task, "classify (sequence classification) | mlm (masked language modelling)",
      one_of({"classify", "mlm"}));
    v("data", data, "JSON lines {\"text\": ..., \"label\": ...} (mlm: text only); default: Austen passages by novel");
    v("eval_data", eval_data, "held-out JSON lines (default: every --held_out_every-th text of --data)");
    v("held_out_every", held_out_every, "every N-th text is held out for evaluation", at_least(2));
    v("passage_words", passage_words, "words per passage of the built-in Austen task", between(8, 400));
    v("max_length", max_length, "tokens per text ([CLS] and [SEP] included; longer texts are cut)", between(4, 4096));
    v("model", model, "tiny | mini | small | medium | base | config.json (training from scratch)");
    v("pretrained", pretrained, "Hugging Face BERT directory to fine-tune");
    v("tokenizer", tokenizer, "directory with tokenizer.json (default: --pretrained's, else a WordPiece vocabulary "
      "learnt from the training texts)");
    v("vocab_size", vocab_size, "size of the learnt WordPiece vocabulary", between(64, 1000000));
    v("dropout", dropout, "hidden, attention and classifier dropout (< 0: the config's)", between(-1, 0.99));
    v("batch_size", batch_size, "texts per rank per step", at_least(1));
    v("epochs", epochs, "passes over the training texts (when --max_steps is 0)", at_least(1));
    v("lr", lr, "peak learning rate", above(0));
    v("weight_decay", weight_decay, "AdamW weight decay (not on biases and norms)", at_least(0));
    v("warmup_ratio", warmup_ratio, "share of the steps spent warming up", from_up_to(0, 1));
    v("save_dir", save_dir, "checkpoints/ and model/ go here");
    v("predict", predict, "classify these texts with a saved model instead of training");
    v("model_dir", model_dir, "--predict's model (default: --pretrained, else SAVE_DIR/model)");
    loop.visit(v);
  }
  void validate() const {}
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::bert_app
