// The verdict of a graded run, for tools/grade.py. The grader cannot trust what a test prints or
// its exit status alone: the student's code runs in the test process and can print Catch2's
// summary and exit 0. So the grader gives each run a fresh secret (SCALELAB_GRADE_NONCE) and a
// path (SCALELAB_GRADE_RESULTS); the test main takes both out of the environment before any
// other code of the binary runs and, only after Catch2's session has returned normally, writes
// <path>.<rank>: every test case that ran, its assertion counts and pass/fail, signed with
// HMAC-SHA256 under the secret. Printing, exiting early, crashing or forking writes nothing
// the grader accepts. Without SCALELAB_GRADE_NONCE (ctest, a student's own run) nothing is
// written. File format and checks: tools/grade.py (read_results).
//
// Include this header in exactly one translation unit of a test binary, the one that defines
// CATCH_CONFIG_RUNNER and main(), and run Catch2 through scalelab_test::run_catch_session.
// It is a header of internal-linkage code on purpose: a separate .cpp would give the writer a
// symbol that other code could call.
#pragma once

#ifndef CATCH_CONFIG_RUNNER
#error "graded_results.hpp belongs in the test main's translation unit (after #define CATCH_CONFIG_RUNNER)"
#endif

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace scalelab_test {
// Everything is in an anonymous namespace, so no other translation unit (the student's code
// included) can name the secret or call the writer.
namespace {

// ---- SHA-256 (FIPS 180-4) and HMAC (RFC 2104): standard library only, checked against Python's
// hashlib in tests/tools/test_grade.py through the fake and real binaries.

constexpr std::array<std::uint32_t, 64> kK = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::string sha256(const std::string& data) {
  std::array<std::uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string msg = data;
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  msg += static_cast<char>(0x80);
  while (msg.size() % 64 != 56) msg += '\0';
  for (int i = 7; i >= 0; --i) msg += static_cast<char>((bits >> (8 * i)) & 0xff);
  for (std::size_t block = 0; block < msg.size(); block += 64) {
    std::array<std::uint32_t, 64> w{};
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 4; ++j)
        w[i] = (w[i] << 8) | static_cast<unsigned char>(msg[block + static_cast<std::size_t>(4 * i + j)]);
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::array<std::uint32_t, 8> v = h;  // a..h
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t s1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      const std::uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      const std::uint32_t t1 = v[7] + s1 + ch + kK[i] + w[i];
      const std::uint32_t s0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      const std::uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      for (int k = 7; k > 0; --k) v[k] = v[k - 1];
      v[4] += t1;
      v[0] = t1 + s0 + maj;
    }
    for (int k = 0; k < 8; ++k) h[k] += v[k];
  }
  std::string out;
  for (std::uint32_t x : h)
    for (int i = 3; i >= 0; --i) out += static_cast<char>((x >> (8 * i)) & 0xff);
  return out;
}

// ---- The grading request, taken at start-up

struct Request {
  std::string nonce, path;
};

Request& request() {
  static Request r;
  return r;
}

// Reads and removes one variable. The value is overwritten in place first: unsetenv only drops
// the pointer, and the original bytes would stay readable in /proc/self/environ.
std::string take_env(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return {};
  std::string copy = value;
  std::memset(value, 'x', copy.size());
  unsetenv(name);
  return copy;
}

// Runs before the ordinary static constructors of the binary (and so before any of the student's
// code): priority 101 is the first that applications may use.
__attribute__((constructor(101))) void take_grading_request() {
  request().nonce = take_env("SCALELAB_GRADE_NONCE");
  request().path = take_env("SCALELAB_GRADE_RESULTS");
}

// ---- Per test case counts

struct CaseResult {
  std::string name;
  std::uint64_t passed = 0, failed = 0;
  bool ok = false;
};

std::vector<CaseResult>& case_results() {
  static std::vector<CaseResult> results;
  return results;
}

class GradedListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    const auto& a = stats.totals.assertions;
    case_results().push_back({stats.testInfo.name, a.passed, a.failed, stats.totals.testCases.allOk()});
  }
};

std::string hmac_sha256_hex(const std::string& key, const std::string& message);

// The rank under mpiexec (OpenMPI, or PMI-style launchers), else 0.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

void write_results(int session_result) {
  const Request& r = request();
  if (r.nonce.empty() || r.path.empty()) return;  // not a graded run
  const int rank = launcher_rank();
  std::string body = "scalelab-graded-results 1\nrank " + std::to_string(rank) + "\nsession " +
                     std::to_string(session_result) + "\n";
  for (const auto& c : case_results()) {
    std::string name = c.name;
    for (char& ch : name)
      if (ch == '\n' || ch == '\r') ch = ' ';
    body += std::string("case ") + (c.ok ? "passed " : "failed ") + std::to_string(c.passed) + " " +
            std::to_string(c.failed) + " " + name + "\n";
  }
  body += "token " + hmac_sha256_hex(r.nonce, body) + "\n";
  const std::string path = r.path + "." + std::to_string(rank);
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  }
}

CATCH_REGISTER_LISTENER(GradedListener)

// HMAC-SHA256(key, message) in lowercase hex (RFC 2104), as Python's hmac module computes it.
std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  std::string k = key.size() > 64 ? sha256(key) : key;
  k.resize(64, '\0');
  std::string inner(64, '\0'), outer(64, '\0');
  for (int i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  const std::string mac = sha256(outer + sha256(inner + message));
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char ch : mac) {
    hex += digits[ch >> 4];
    hex += digits[ch & 15];
  }
  return hex;
}

// Runs Catch2 and, in a graded run, writes this process's results file. Returns what Catch2
// returned (the number of failed test cases, capped at 255).
int run_catch_session(int argc, char** argv) {
  const int result = Catch::Session().run(argc, argv);
  write_results(result);
  return result;
}

}  // namespace
}  // namespace scalelab_test
