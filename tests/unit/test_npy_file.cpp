// .npy files: what numpy.save writes is read, what kfuse writes numpy reads (tests/python
// checks that side), and every other file is refused naming the file and what it holds.
#include "kfuse/error.h"
#include "runtime/npy_file.h"

#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

using namespace kfuse;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/kfuse-npy-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string &name) const { return (path / name).string(); }
};

// A .npy file as numpy.save writes it: version 1.0, `header` padded to 64 bytes, then `data`.
std::string npy_bytes(const std::string &header, const std::string &data, char major = 1) {
  std::string h = header;
  size_t fixed = major == 1 ? 10 : 12;
  h.append((64 - (fixed + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += major;
  out += '\0';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  if (major != 1)
    out += std::string(2, '\0');
  return out + h + data;
}

void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string floats(std::initializer_list<float> values) {
  std::string s(values.size() * sizeof(float), '\0');
  std::memcpy(s.data(), values.begin(), s.size());
  return s;
}

} // namespace

TEST_CASE("npy: numpy.save's layout is read, kfuse's writes round-trip") {
  TempDir dir;
  write_bytes(dir.file("a.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                        floats({1, 2, 3, 4, 5, 6})));
  rt::NpyArray a = rt::read_npy(dir.file("a.npy"));
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.dtype == DType::F32);
  CHECK(a.data == std::vector<double>{1, 2, 3, 4, 5, 6});

  write_bytes(
      dir.file("v2.npy"),
      npy_bytes("{'shape': (3,), 'descr': '<f4', 'fortran_order': False}", floats({7, 8, 9}), 2));
  CHECK(rt::read_npy(dir.file("v2.npy")).shape == std::vector<int64_t>{3});

  rt::write_npy(dir.file("b.npy"), {4}, {0.5f, -1, 2, 3});
  rt::NpyArray b = rt::read_npy(dir.file("b.npy"));
  CHECK(b.shape == std::vector<int64_t>{4});
  CHECK(b.data == std::vector<double>{0.5, -1, 2, 3});
  // The 10 fixed bytes and the 58-character header dict with its '\n' padded to 128, as numpy
  // pads it (to a multiple of 64), then the data.
  CHECK(std::filesystem::file_size(dir.file("b.npy")) == 128 + 16);

  // float16 ('<f2'), exactly: 1, -2, 65504 (the largest f16), 2^-24 (the smallest subnormal).
  write_bytes(dir.file("h.npy"),
              npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }",
                        std::string("\x00\x3c\x00\xc0\xff\x7b\x01\x00", 8)));
  CHECK(rt::read_npy(dir.file("h.npy")).data == std::vector<double>{1, -2, 65504, 0x1p-24});

  rt::write_npy(dir.file("c.npy"), {2, 1}, {1, 2});
  CHECK(rt::read_npy(dir.file("c.npy")).shape == std::vector<int64_t>{2, 1});

  // int64 ('<i8'), class indices: read exactly, written as int64.
  const int64_t indices[] = {3, -100, (int64_t(1) << 53) - 1};
  write_bytes(dir.file("i.npy"),
              npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                        std::string(reinterpret_cast<const char *>(indices), sizeof(indices))));
  rt::NpyArray i = rt::read_npy(dir.file("i.npy"));
  CHECK(i.dtype == DType::I64);
  CHECK(i.data == std::vector<double>{3, -100, 0x1p53 - 1});
  rt::write_npy(dir.file("j.npy"), {3}, i.data, DType::I64);
  CHECK(rt::read_npy(dir.file("j.npy")).dtype == DType::I64);
  CHECK(rt::read_npy(dir.file("j.npy")).data == i.data);

  // A write that fails only when the stream is flushed (`kfuse run --save` to a full disk).
  if (std::filesystem::exists("/dev/full"))
    CHECK_THROWS_WITH(rt::write_npy("/dev/full", {2}, {1, 2}), "/dev/full: cannot write");
}

TEST_CASE("npy: other dtypes, Fortran order, wrong sizes and non-npy files are refused by name") {
  TempDir dir;
  auto refused = [&](const std::string &name, const std::string &bytes) {
    write_bytes(dir.file(name), bytes);
    std::string what;
    try {
      rt::read_npy(dir.file(name));
    } catch (const Error &e) {
      what = e.what();
    }
    CHECK(what.find(dir.file(name) + ": ") == 0);
    return what;
  };
  CHECK(refused("f8.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                    floats({1, 2, 3, 4})))
            .find("dtype '<f8' (2); kfuse reads float32 ('<f4'), float16 ('<f2') and int64 ('<i8', "
                  "class indices): np.save(path, a.astype(np.float32)) (bf16 has no standard .npy "
                  "type") != std::string::npos);
  // ml_dtypes' bfloat16 saves as raw 2-byte void: refused, with what to do instead.
  CHECK(refused("bf16.npy", npy_bytes("{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }",
                                      std::string(4, '\0')))
            .find("save bf16 tensors as float32") != std::string::npos);
  CHECK(
      refused("fortran.npy", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }",
                                       floats({1, 2})))
          .find("Fortran order (2, 1); kfuse reads C order") != std::string::npos);
  CHECK(refused("short.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                       floats({1, 2})))
            .find("shape (3) needs 12 bytes of float32 data, the file has 8") != std::string::npos);
  CHECK(refused("long.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
                                      floats({1, 2})))
            .find("needs 4 bytes of float32 data, the file has 8") != std::string::npos);
  const int64_t huge[] = {int64_t(1) << 60};
  CHECK(refused("huge.npy", npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                                      std::string(reinterpret_cast<const char *>(huge), 8)))
            .find("element 0 (1152921504606846976) is beyond 2^53") != std::string::npos);
  CHECK(refused("i4.npy", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }",
                                    std::string(4, '\0')))
            .find("dtype '<i4' (1)") != std::string::npos);
  CHECK(refused("text.npy", "x,y\n1,2\n").find("not a .npy file") != std::string::npos);
  CHECK(refused("extra.npy",
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                          floats({1})))
            .find("keys other than descr, fortran_order and shape") != std::string::npos);
  CHECK(refused("shape.npy",
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", ""))
            .find("not a tuple of non-negative integers") != std::string::npos);
  CHECK_THROWS_WITH_AS(rt::read_npy(dir.file("missing.npy")),
                       doctest::Contains("missing.npy: cannot open"), Error);
}
