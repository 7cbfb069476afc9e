// The Historical Embedding Cache's three operations (DistGNN-MB, section 3.2):
// HECSearch, HECLoad and HECStore, each over a whole minibatch.
//
// A cache of C lines holds embeddings of the halo vertices of one rank, tagged
// by the vertex. Tags are passed here as *slots*: the vertex's position among
// the rank's halo vertices (gnnrun/ops/hec.py maps original ids to slots).
// State, all owned by the caller:
//   slot_line  int64 [H]    the line holding slot s, or -1
//   line_slot  int64 [C]    the slot held by line l, or -1 (empty)
//   line_stamp int64 [C]    the step from which line l's embedding is usable;
//                           kEmpty for a line never written
//   data       float [C, D] the embeddings
// A line is valid at step `now` while now - stamp <= lifespan; older lines are
// purged: a search misses them and they are the first to be replaced.
//
// hec_search(slot_line, line_stamp, slots, now, lifespan) -> lines
//   lines[i]: the valid line of slots[i], or -1 (absent or expired).
// hec_load(data, lines) -> rows
//   rows[i] = data[lines[i]] (every line >= 0).
// hec_store(slot_line, line_slot, line_stamp, data, slots, rows, now) -> stored
//   In place. Of duplicate slots the last occurrence wins. A slot that has a
//   line is overwritten there; new slots take the lines of smallest
//   (stamp, line) first -- empty, then expired, then oldest: oldest cache line
//   first -- in input order, never a line written by this same call. When more
//   new slots arrive than lines are left, the last ones in input order are
//   kept. Every written line gets stamp `now`. Returns the number of rows kept.
// gnnrun/ops/hec.py holds the PyTorch reference of the same three functions.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
constexpr int64_t kGrain = 2048;

void check_state(const at::Tensor& slot_line, const at::Tensor& line_stamp) {
  TORCH_CHECK(slot_line.dtype() == at::kLong && slot_line.is_contiguous(),
              "slot_line must be contiguous int64");
  TORCH_CHECK(line_stamp.dtype() == at::kLong && line_stamp.is_contiguous(),
              "line_stamp must be contiguous int64");
}

at::Tensor hec_search(at::Tensor slot_line, at::Tensor line_stamp, at::Tensor slots,
                         int64_t now, int64_t lifespan) {
  check_state(slot_line, line_stamp);
  slots = slots.contiguous();
  const int64_t n = slots.numel(), num_slots = slot_line.numel();
  auto lines = at::empty({n}, slots.options());
  const int64_t* s = slots.data_ptr<int64_t>();
  const int64_t* where = slot_line.data_ptr<int64_t>();
  const int64_t* stamp = line_stamp.data_ptr<int64_t>();
  int64_t* out = lines.data_ptr<int64_t>();
  bool bad_slot = false;
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (s[i] < 0 || s[i] >= num_slots) {
        bad_slot = true;
        out[i] = -1;
        continue;
      }
      const int64_t line = where[s[i]];
      out[i] = (line >= 0 && now - stamp[line] <= lifespan) ? line : -1;
    }
  });
  TORCH_CHECK(!bad_slot, "hec_search: a slot outside [0, ", num_slots, ")");
  return lines;
}

at::Tensor hec_load(at::Tensor data, at::Tensor lines) {
  TORCH_CHECK(data.dim() == 2 && data.is_contiguous(), "data must be a contiguous matrix");
  lines = lines.contiguous();
  const int64_t n = lines.numel(), width = data.size(1), num_lines = data.size(0);
  auto rows = at::empty({n, width}, data.options());
  const int64_t* l = lines.data_ptr<int64_t>();
  const size_t row_bytes = static_cast<size_t>(width) * data.element_size();
  const char* src = static_cast<const char*>(data.data_ptr());
  char* dst = static_cast<char*>(rows.data_ptr());
  bool bad_line = false;
  at::parallel_for(0, n, std::max<int64_t>(1, kGrain * 64 / std::max<int64_t>(width, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       if (l[i] < 0 || l[i] >= num_lines) {
                         bad_line = true;
                         continue;
                       }
                       std::memcpy(dst + i * row_bytes, src + l[i] * row_bytes, row_bytes);
                     }
                   });
  TORCH_CHECK(!bad_line, "hec_load: a line outside [0, ", num_lines, ")");
  return rows;
}

int64_t hec_store(at::Tensor slot_line, at::Tensor line_slot, at::Tensor line_stamp,
                  at::Tensor data, at::Tensor slots, at::Tensor rows, int64_t now) {
  check_state(slot_line, line_stamp);
  TORCH_CHECK(line_slot.dtype() == at::kLong && line_slot.is_contiguous(),
              "line_slot must be contiguous int64");
  TORCH_CHECK(data.dim() == 2 && data.is_contiguous(), "data must be a contiguous matrix");
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == slots.numel() && rows.size(1) == data.size(1),
              "rows must be [len(slots), width]");
  TORCH_CHECK(rows.dtype() == data.dtype(), "rows and data must share a dtype");
  slots = slots.contiguous();
  rows = rows.contiguous();
  const int64_t n = slots.numel(), num_slots = slot_line.numel(), num_lines = line_slot.numel();
  const int64_t* s = slots.data_ptr<int64_t>();
  int64_t* where = slot_line.data_ptr<int64_t>();
  int64_t* holder = line_slot.data_ptr<int64_t>();
  int64_t* stamp = line_stamp.data_ptr<int64_t>();
  const size_t row_bytes = static_cast<size_t>(data.size(1)) * data.element_size();
  char* lines_data = static_cast<char*>(data.data_ptr());
  const char* incoming = static_cast<const char*>(rows.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(s[i] >= 0 && s[i] < num_slots, "hec_store: a slot outside [0, ", num_slots, ")");
  }
  if (num_lines == 0 || n == 0) return 0;

  // The last occurrence of each slot, in input order.
  std::vector<std::pair<int64_t, int64_t>> by_slot(n);
  for (int64_t i = 0; i < n; ++i) by_slot[i] = {s[i], i};
  std::sort(by_slot.begin(), by_slot.end());
  std::vector<int64_t> kept;
  kept.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i + 1 == n || by_slot[i + 1].first != by_slot[i].first) kept.push_back(by_slot[i].second);
  }
  std::sort(kept.begin(), kept.end());

  std::vector<int64_t> resident, fresh;
  for (int64_t i : kept) (where[s[i]] >= 0 ? resident : fresh).push_back(i);
  for (int64_t i : resident) {
    const int64_t line = where[s[i]];
    std::memcpy(lines_data + line * row_bytes, incoming + i * row_bytes, row_bytes);
    stamp[line] = now;
  }
  const int64_t room = num_lines - static_cast<int64_t>(resident.size());
  if (static_cast<int64_t>(fresh.size()) > room) fresh.erase(fresh.begin(), fresh.end() - room);
  const int64_t k = static_cast<int64_t>(fresh.size());
  if (k == 0) return static_cast<int64_t>(resident.size());

  // Victims: the k smallest (stamp, line), lines written above excluded.
  // Lines fill in order and are never emptied, so the empty lines are a
  // suffix; when k of them are left they are the victims, with no scan.
  std::vector<int64_t> victims(k);
  const int64_t first_empty =
      std::partition_point(stamp, stamp + num_lines, [](int64_t t) { return t != kEmpty; }) - stamp;
  if (num_lines - first_empty >= k) {
    for (int64_t j = 0; j < k; ++j) victims[j] = first_empty + j;
  } else {
    std::vector<char> written(num_lines, 0);
    for (int64_t i : resident) written[where[s[i]]] = 1;
    std::vector<std::pair<int64_t, int64_t>> keys;
    keys.reserve(num_lines);
    for (int64_t line = 0; line < num_lines; ++line) {
      if (!written[line]) keys.emplace_back(stamp[line], line);
    }
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end());
    std::sort(keys.begin(), keys.begin() + k);
    for (int64_t j = 0; j < k; ++j) victims[j] = keys[j].second;
  }
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = fresh[j], line = victims[j];
    if (holder[line] >= 0) where[holder[line]] = -1;
    holder[line] = s[i];
    where[s[i]] = line;
    stamp[line] = now;
    std::memcpy(lines_data + line * row_bytes, incoming + i * row_bytes, row_bytes);
  }
  return static_cast<int64_t>(resident.size()) + k;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnrun, m) {
  m.def("hec_search(Tensor slot_line, Tensor line_stamp, Tensor slots, int now, int lifespan) -> "
        "Tensor",
        &hec_search);
  m.def("hec_load(Tensor data, Tensor lines) -> Tensor", &hec_load);
  m.def("hec_store(Tensor(a!) slot_line, Tensor(b!) line_slot, Tensor(c!) line_stamp, "
        "Tensor(d!) data, Tensor slots, Tensor rows, int now) -> int",
        &hec_store);
}
