// `meshtrain data prepare-images`: an image-folder tree or IDX files ->
// WebDataset shards (data/image_shards.h) and a meta.json beside them.
//
// Folder input (torchvision ImageFolder's layout): DIR/<class>/**/<image>,
// classes sorted by folder name (byte order), index = position. Files are
// taken by extension (.jpg .jpeg .png, any case) and sniffed by content; each
// is decoded once to validate it, and stored with its original bytes (the
// WebDataset extension from the content: a PNG named .jpg is stored as .png).
// Hidden entries (".name") are skipped, unlike ImageFolder, which would make
// a stray .ipynb_checkpoints folder a class; other files are counted as
// ignored; an empty class folder is an error (ImageFolder refuses it too). When
// DIR holds both train/ and val/ folders, those are the splits (each in the
// class layout, with the same classes) and --val-fraction is not used;
// otherwise a seeded choice of round(val_fraction * N) images becomes val.
//
// IDX input (MNIST / Fashion-MNIST): DIR/train-images-idx3-ubyte[.gz] with
// train-labels-idx1-ubyte[.gz] and t10k-* -> splits "train" and "test", each
// image stored as a 1-channel PNG; class names are Fashion-MNIST's when DIR
// holds 10 classes and looks like it (its name contains "fashion"), else
// "0".."9".
//
// Each split is shuffled with the seed before sharding (the shards' order is
// the shuffled order), so a sequential reader sees mixed classes.
// Deterministic for the same inputs and options, whatever the thread count.
//
// meta.json: {"format": "webdataset", "source": "folder"|"idx", "input",
// "classes": [names in index order], "num_classes", "channels" (1 when every
// image is grayscale, else 3), "image_size": [height, width] when uniform else
// null, "mean"/"std": per channel, of pixel / 255 over the train split,
// "image_extensions", "label_extension": "cls", "seed", "shard_samples",
// "skipped": corrupt images left out, "splits": {"train"|"val"|"test":
// {"samples", "shards": [file names], "per_class": [counts], "image_bytes"}}}.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::data {

struct ImagePrepareOptions {
  std::string folder;   // ImageFolder tree, or
  std::string idx_dir;  // IDX files
  std::string out_dir;
  double val_fraction = 0.1;       // folders without train/ and val/
  int64_t shard_samples = 10000;   // samples per shard at most
  bool skip_corrupt = false;       // else the first corrupt image fails the run
  uint64_t seed = 1;
  int64_t limit = 0;               // > 0: at most this many images per split (the first ones)
  int threads = 0;                 // decode/encode threads; 0 = all cores
};

struct ImageSplitResult {
  std::string name;                  // "train", "val", "test"
  int64_t samples = 0;
  std::vector<int64_t> per_class;    // samples of each class
  std::vector<std::string> shards;   // paths
  int64_t bytes = 0;                 // encoded image bytes stored
};

struct ImagePrepareResult {
  std::string source;                // "folder" or "idx"
  std::vector<std::string> classes;  // names, in index order
  std::vector<ImageSplitResult> splits;
  std::vector<std::string> skipped;  // "PATH: reason" (corrupt images under skip_corrupt)
  int64_t ignored_files = 0;         // files that are not .jpg/.jpeg/.png (folders)
  int width = 0, height = 0;         // when every image has this size, else 0
  int channels = 0;                  // 1 when every image is grayscale, else 3
  std::vector<double> mean, std;     // per channel, of pixel / 255, over the train split
  std::string meta_path;
  double seconds = 0;                // wall time
};

// Throws meshtrain::Error for a missing input, an empty class or split, or
// (without skip_corrupt) a corrupt image, naming the file.
ImagePrepareResult prepare_images(const ImagePrepareOptions& options);

// Fashion-MNIST's class names in label order.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace meshtrain::data
