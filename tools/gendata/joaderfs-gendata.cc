// joaderfs-gendata: writes a synthetic ImageFolder dataset of JPEGs.
//
//   joaderfs-gendata OUTDIR --images N --classes C [--seed S] [--corrupt K]
//                    [--threads T]
//
// OUTDIR/class_<c>/img_<i>.jpg, image i in class i % C. Sizes follow ImageNet
// roughly (sides 200-800, mean about 400x350, aspect 0.6-1.8); content mixes
// gradients, Perlin/Worley noise, sine gratings, shapes and text in a hue
// that depends on the class. Every image is a function of (seed, i) only, so
// the output does not depend on the thread count. --corrupt K adds K files
// named .jpg that no decoder accepts, to exercise the daemon's skipping.

#include <vips/vips.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Options {
  fs::path out_dir;
  int images = -1;
  int classes = -1;
  uint64_t seed = 1;
  int corrupt = 0;
  int threads = 0;  // 0: min(cores, 4)
};

// SplitMix64: tiny, and the same draws on every platform (the std
// distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Unit(); }
  int Int(int lo, int hi) {  // inclusive
    return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(double p) { return Unit() < p; }
  double Normal() {  // Box-Muller
    const double u = 1.0 - Unit();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * Unit());
  }
  // A seed for a vips generator (a gint).
  int Seed() { return static_cast<int>(Next() & 0x7fffffff); }

 private:
  uint64_t state_;
};

struct Rgb {
  double r, g, b;
};

// h in degrees (any non-negative value), s and v in [0, 1]; components in
// [0, 255].
Rgb FromHsv(double h, double s, double v) {
  const double c = v * s;
  const double hp = std::fmod(h, 360.0) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  // (r, g, b) without the offset m, for each sixth of the hue circle.
  const double sextants[6][3] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}};
  const double* rgb = sextants[std::min(5, static_cast<int>(hp))];
  const double m = v - c;
  return {(rgb[0] + m) * 255, (rgb[1] + m) * 255, (rgb[2] + m) * 255};
}

// Owns the images made while drawing one picture; turns vips failures into
// exceptions.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (VipsImage* image : images_) g_object_unref(image);
  }

  // Runs a vips operation that writes a new image to its argument.
  VipsImage* Make(const std::function<int(VipsImage**)>& operation) {
    VipsImage* image = nullptr;
    if (operation(&image) != 0) Fail();
    images_.push_back(image);
    return image;
  }

  VipsImage* Keep(VipsImage* image) {
    if (image == nullptr) Fail();
    images_.push_back(image);
    return image;
  }

  [[noreturn]] static void Fail() {
    std::string message = vips_error_buffer();
    vips_error_clear();
    throw std::runtime_error("libvips: " + message);
  }

 private:
  std::vector<VipsImage*> images_;
};

// A one-band float pattern with values roughly in [0, 1].
VipsImage* Pattern(Arena& arena, Rng& rng, int width, int height) {
  switch (rng.Int(0, 3)) {
    case 0: {  // a linear gradient at a random angle
      const double angle = rng.Uniform(0, 2 * std::numbers::pi);
      double a[2] = {std::cos(angle) / width, std::sin(angle) / height};
      double b[2] = {0.5, 0.5};
      VipsImage* xy =
          arena.Make([&](VipsImage** o) { return vips_xyz(o, width, height, nullptr); });
      VipsImage* scaled =
          arena.Make([&](VipsImage** o) { return vips_linear(xy, o, a, b, 2, nullptr); });
      return arena.Make([&](VipsImage** o) { return vips_bandmean(scaled, o, nullptr); });
    }
    case 1: {  // Perlin noise, clouds at a random scale
      const int cell = rng.Int(24, 192);
      const int seed = rng.Seed();
      VipsImage* noise = arena.Make([&](VipsImage** o) {
        return vips_perlin(o, width, height, "cell_size", cell, "seed", seed, nullptr);
      });
      return arena.Make([&](VipsImage** o) { return vips_linear1(noise, o, 0.5, 0.5, nullptr); });
    }
    case 2: {  // Worley noise, cells
      const int cell = rng.Int(32, 160);
      const int seed = rng.Seed();
      VipsImage* noise = arena.Make([&](VipsImage** o) {
        return vips_worley(o, width, height, "cell_size", cell, "seed", seed, nullptr);
      });
      return arena.Make(
          [&](VipsImage** o) { return vips_linear1(noise, o, 1.0 / cell, 0, nullptr); });
    }
    default: {  // a sine grating
      const double hfreq = rng.Uniform(0.2, 6);
      const double vfreq = rng.Uniform(0.2, 6);
      VipsImage* sines = arena.Make([&](VipsImage** o) {
        return vips_sines(o, width, height, "hfreq", hfreq, "vfreq", vfreq, nullptr);
      });
      return arena.Make([&](VipsImage** o) { return vips_linear1(sines, o, 0.5, 0.5, nullptr); });
    }
  }
}

std::vector<double> Ink(const Rgb& colour) { return {colour.r, colour.g, colour.b}; }

// Draws random circles, rectangles and lines onto an in-memory uchar image.
void DrawShapes(VipsImage* canvas, Rng& rng, double hue) {
  const int width = canvas->Xsize;
  const int height = canvas->Ysize;
  const int shapes = rng.Int(1, 8);
  for (int i = 0; i < shapes; ++i) {
    std::vector<double> ink =
        Ink(FromHsv(hue + rng.Uniform(-60, 60) + 360, rng.Uniform(0.2, 1), rng.Uniform(0.2, 1)));
    const int x = rng.Int(0, width - 1);
    const int y = rng.Int(0, height - 1);
    const int fill = rng.Chance(0.6);
    int status = 0;
    switch (rng.Int(0, 2)) {
      case 0:
        status = vips_draw_circle(canvas, ink.data(), 3, x, y,
                                  rng.Int(5, std::min(width, height) / 3), "fill", fill, nullptr);
        break;
      case 1:
        status = vips_draw_rect(canvas, ink.data(), 3, x, y, rng.Int(5, width / 2),
                                rng.Int(5, height / 2), "fill", fill, nullptr);
        break;
      default:
        status = vips_draw_line(canvas, ink.data(), 3, x, y, rng.Int(0, width - 1),
                                rng.Int(0, height - 1), nullptr);
        break;
    }
    if (status != 0) Arena::Fail();
  }
}

void DrawText(Arena& arena, VipsImage* canvas, Rng& rng, double hue, int label, int index) {
  static const char* const kFonts[] = {"sans", "sans bold", "serif", "serif italic", "monospace"};
  const std::string font = kFonts[rng.Int(0, 4)];
  const std::string text = "class " + std::to_string(label) + "\n#" + std::to_string(index);
  const int dpi = rng.Int(60, 300);
  VipsImage* mask = arena.Make([&](VipsImage** o) {
    return vips_text(o, text.c_str(), "font", font.c_str(), "dpi", dpi, nullptr);
  });
  std::vector<double> ink = Ink(FromHsv(hue + 180, rng.Uniform(0, 1), rng.Chance(0.5) ? 1.0 : 0.1));
  // vips_draw_mask clips a mask that does not fit.
  const int x = rng.Int(-mask->Xsize / 4, canvas->Xsize - mask->Xsize / 2);
  const int y = rng.Int(-mask->Ysize / 4, canvas->Ysize - mask->Ysize / 2);
  if (vips_draw_mask(canvas, ink.data(), 3, mask, x, y, nullptr) != 0) {
    Arena::Fail();
  }
}

struct Size {
  int width, height;
};

Size DrawSize(Rng& rng) {
  // sqrt(area) log-normal around 375 and aspect log-normal around 1.15:
  // about 400x350 on average, like ImageNet's training images.
  const double side = 375 * std::exp(0.22 * rng.Normal());
  const double aspect = std::clamp(1.15 * std::exp(0.25 * rng.Normal()), 0.6, 1.8);
  auto clamp_side = [](double v) { return static_cast<int>(std::clamp(v, 200.0, 800.0)); };
  return {clamp_side(side * std::sqrt(aspect)), clamp_side(side / std::sqrt(aspect))};
}

struct Written {
  Size size;
  uintmax_t bytes;
};

// Draws image `index` of class `label` into a JPEG file at `path`.
Written WriteImage(const fs::path& path, uint64_t seed, int index, int label, int classes) {
  Rng rng(seed * 0x2545f4914f6cdd1dULL + static_cast<uint64_t>(index));
  Arena arena;
  const Size size = DrawSize(rng);
  const double hue = 360.0 * label / classes + rng.Uniform(-15, 15) + 360;

  // Two colours of the class's hue blended by one or two patterns.
  VipsImage* weight = Pattern(arena, rng, size.width, size.height);
  if (rng.Chance(0.5)) {
    VipsImage* other = Pattern(arena, rng, size.width, size.height);
    VipsImage* sum = arena.Make([&](VipsImage** o) { return vips_add(weight, other, o, nullptr); });
    weight = arena.Make([&](VipsImage** o) { return vips_linear1(sum, o, 0.5, 0, nullptr); });
  }
  const Rgb low = FromHsv(hue, rng.Uniform(0.3, 1), rng.Uniform(0.1, 0.6));
  const Rgb high = FromHsv(hue + rng.Uniform(-40, 40), rng.Uniform(0.1, 0.9), rng.Uniform(0.5, 1));
  double a[3] = {high.r - low.r, high.g - low.g, high.b - low.b};
  double b[3] = {low.r, low.g, low.b};
  VipsImage* colour =
      arena.Make([&](VipsImage** o) { return vips_linear(weight, o, a, b, 3, nullptr); });

  const double sigma = rng.Uniform(0, 18);
  const int noise_seed = rng.Seed();
  VipsImage* noise = arena.Make([&](VipsImage** o) {
    return vips_gaussnoise(o, size.width, size.height, "mean", 0.0, "sigma", sigma, "seed",
                           noise_seed, nullptr);
  });
  VipsImage* noisy = arena.Make([&](VipsImage** o) { return vips_add(colour, noise, o, nullptr); });
  VipsImage* pixels =
      arena.Make([&](VipsImage** o) { return vips_cast(noisy, o, VIPS_FORMAT_UCHAR, nullptr); });
  pixels->Type = VIPS_INTERPRETATION_sRGB;

  // Drawing works in place, so on a private copy in memory.
  VipsImage* canvas = arena.Keep(vips_image_copy_memory(pixels));
  DrawShapes(canvas, rng, hue);
  if (rng.Chance(0.7)) DrawText(arena, canvas, rng, hue, label, index);
  if (rng.Chance(0.25)) {
    const double blur = rng.Uniform(0.5, 2.5);
    canvas = arena.Make([&](VipsImage** o) { return vips_gaussblur(canvas, o, blur, nullptr); });
  }
  if (vips_jpegsave(canvas, path.c_str(), "Q", 90, "strip", TRUE, nullptr) != 0) {
    Arena::Fail();
  }
  return {size, fs::file_size(path)};
}

// Writes a file named .jpg that every decoder rejects; which kind depends on
// `index`. A JPEG cut inside its scan data would not do: libvips decodes it
// and greys the missing rows, so the cut is inside the headers.
void WriteCorrupt(const fs::path& path, int index) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  switch (index % 4) {
    case 0: {  // a JPEG cut before its frame header
      VipsImage* image = nullptr;
      if (vips_black(&image, 64, 64, "bands", 3, nullptr) != 0) Arena::Fail();
      void* buffer = nullptr;
      size_t length = 0;
      const int status = vips_jpegsave_buffer(image, &buffer, &length, nullptr);
      g_object_unref(image);
      if (status != 0) Arena::Fail();
      out.write(static_cast<const char*>(buffer),
                static_cast<std::streamsize>(std::min<size_t>(length, 40)));
      g_free(buffer);
      break;
    }
    case 1: out << "this is not a JPEG image\n"; break;
    case 2:  // empty
      break;
    default: {  // a JPEG start-of-image marker followed by garbage
      Rng rng(static_cast<uint64_t>(index));
      out.put(static_cast<char>(0xff)).put(static_cast<char>(0xd8));
      for (int i = 0; i < 1000; ++i) out.put(static_cast<char>(rng.Next()));
      break;
    }
  }
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

[[noreturn]] void Usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "joaderfs-gendata: %s\n", problem.c_str());
  std::fprintf(stderr,
               "usage: joaderfs-gendata OUTDIR --images N --classes C "
               "[--seed S] [--corrupt K] [--threads T]\n");
  std::exit(problem.empty() ? 0 : 2);
}

long ParseNumber(const std::string& flag, const char* text, long min) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min) {
    Usage(flag + " needs an integer >= " + std::to_string(min) + ", not '" + text + "'");
  }
  return value;
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") Usage("");
    if (arg.rfind("--", 0) == 0) {
      if (i + 1 == argc) Usage(arg + " needs a value");
      const char* value = argv[++i];
      if (arg == "--images") {
        options.images = static_cast<int>(ParseNumber(arg, value, 1));
      } else if (arg == "--classes") {
        options.classes = static_cast<int>(ParseNumber(arg, value, 1));
      } else if (arg == "--seed") {
        options.seed = static_cast<uint64_t>(ParseNumber(arg, value, 0));
      } else if (arg == "--corrupt") {
        options.corrupt = static_cast<int>(ParseNumber(arg, value, 0));
      } else if (arg == "--threads") {
        options.threads = static_cast<int>(ParseNumber(arg, value, 1));
      } else {
        Usage("unknown option " + arg);
      }
    } else if (options.out_dir.empty()) {
      options.out_dir = arg;
    } else {
      Usage("unexpected argument " + arg);
    }
  }
  if (options.out_dir.empty()) Usage("missing OUTDIR");
  if (options.images < 0 || options.classes < 0) {
    Usage("--images and --classes are required");
  }
  if (options.threads == 0) {
    options.threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  }
  return options;
}

// Zero-padded decimal, wide enough for values below `limit`.
std::string Padded(int value, int limit) {
  const int digits = std::max(3, static_cast<int>(std::to_string(limit - 1).size()));
  std::string text = std::to_string(value);
  return std::string(std::max(0, digits - static_cast<int>(text.size())), '0') + text;
}

int Run(const Options& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<fs::path> class_dirs;
  for (int c = 0; c < options.classes; ++c) {
    class_dirs.push_back(options.out_dir / ("class_" + Padded(c, options.classes)));
    fs::create_directories(class_dirs.back());
  }

  // Threads take image indices in turn; every image depends on its index
  // only, so the dataset is the same whatever the interleaving.
  std::atomic<int> next{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> total_width{0}, total_height{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;  // the first failure, GUARDED_BY(error_mutex)
  auto work = [&] {
    try {
      for (int i = next++; i < options.images && !failed; i = next++) {
        const int label = i % options.classes;
        const fs::path path = class_dirs[label] / ("img_" + Padded(i, options.images) + ".jpg");
        const Written written = WriteImage(path, options.seed, i, label, options.classes);
        bytes += written.bytes;
        total_width += written.size.width;
        total_height += written.size.height;
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(error_mutex);
      if (!failed.exchange(true)) error = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) threads.emplace_back(work);
  for (auto& thread : threads) thread.join();
  if (failed) {
    std::fprintf(stderr, "joaderfs-gendata: %s\n", error.c_str());
    return 1;
  }
  for (int k = 0; k < options.corrupt; ++k) {
    WriteCorrupt(
        class_dirs[k % options.classes] / ("corrupt_" + Padded(k, options.corrupt) + ".jpg"), k);
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "joaderfs-gendata: %d images (mean %.0fx%.0f, %.1f MB) in %d classes, "
      "%d corrupt, seed %llu, in %s, %.1f s\n",
      options.images, static_cast<double>(total_width) / options.images,
      static_cast<double>(total_height) / options.images, bytes / 1e6, options.classes,
      options.corrupt, static_cast<unsigned long long>(options.seed), options.out_dir.c_str(),
      seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (VIPS_INIT(argv[0]) != 0) {
    std::fprintf(stderr, "joaderfs-gendata: cannot start libvips\n");
    return 1;
  }
  const Options options = ParseOptions(argc, argv);
  // Parallel over images, not inside one: one vips thread per image, and no
  // operation cache holding images we will never ask for again.
  vips_concurrency_set(1);
  vips_cache_set_max(0);
  int status = 1;
  try {
    status = Run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "joaderfs-gendata: %s\n", e.what());
  }
  vips_shutdown();
  return status;
}
