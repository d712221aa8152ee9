// Co-simulation harness: the Verilated TCU, two AXI4 DRAMs and a host that streams a program.
//
// Built once per design by systolix.rtl.cosim (design.h, generated beside this file, names the
// model and its memories). One run: load the DRAM images, stream the .tprog over the instruction
// port at one bus word a clock, clock until the TCU is idle, then write the DRAM images back and,
// when asked, every on-chip memory and register. Prints one JSON object on stdout.
//
// The DRAM model (per port, reads and writes in order of acceptance):
//   read:  a burst's first beat comes `latency` clocks after its address is accepted, and after
//          the previous burst's last beat plus `gap`; then a beat every `beat_cycles` clocks.
//   write: a beat is accepted every `beat_cycles` clocks once its burst's address is known; the
//          response comes `write_latency` clocks after the burst's last beat.
// Every timing rule here is mirrored by systolix.perf.rtl_timing, which predicts the cycles.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>
#include <chrono>

#include "verilated.h"

namespace {

struct Options {
    std::string program, dram_in[2], dram_out[2], state_out, samples_out;
    uint64_t max_cycles = 2000000000ULL;
    uint64_t latency = 32, write_latency = 32, beat_cycles = 1, gap = 0;
    uint64_t tracepoint_limit = 1000;
};

std::vector<uint8_t> read_file(const std::string& path) {
    std::vector<uint8_t> data;
    if (path.empty()) return data;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) { std::fprintf(stderr, "cannot open %s\n", path.c_str()); std::exit(3); }
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    data.resize(size);
    if (size && std::fread(data.data(), 1, size, f) != (size_t)size) { std::fprintf(stderr, "short read %s\n", path.c_str()); std::exit(3); }
    std::fclose(f);
    return data;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) { std::fprintf(stderr, "cannot write %s\n", path.c_str()); std::exit(3); }
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
}

// Bits of a Verilated value, least significant first, as bytes.
void put_bits(std::vector<uint8_t>& out, uint64_t v, int bits) {
    for (int b = 0; b < (bits + 7) / 8; ++b) out.push_back((uint8_t)(v >> (8 * b)));
}
template <std::size_t W>
void put_bits(std::vector<uint8_t>& out, const VlWide<W>& v, int bits) {
    for (int b = 0; b < (bits + 7) / 8; ++b) out.push_back((uint8_t)(v[b / 4] >> (8 * (b % 4))));
}
template <std::size_t W>
void set_bits(VlWide<W>& v, const uint8_t* in, int bits) {
    for (std::size_t i = 0; i < W; ++i) v[i] = 0;
    for (int b = 0; b < (bits + 7) / 8; ++b) v[b / 4] |= (uint32_t)in[b] << (8 * (b % 4));
}
void set_bits(uint64_t& v, const uint8_t* in, int bits) {
    v = 0;
    for (int b = 0; b < (bits + 7) / 8; ++b) v |= (uint64_t)in[b] << (8 * b);
}
void set_bits(uint32_t& v, const uint8_t* in, int bits) {
    v = 0;
    for (int b = 0; b < (bits + 7) / 8; ++b) v |= (uint32_t)in[b] << (8 * b);
}
void set_bits(uint8_t& v, const uint8_t* in, int) { v = in[0]; }
void set_bits(uint16_t& v, const uint8_t* in, int) { v = (uint16_t)(in[0] | (in[1] << 8)); }
// A bus word into memory bytes (every byte of the word: the TCU writes whole words).
template <typename T>
void put_bits_into(uint8_t* out, const T& v) {
    for (std::size_t b = 0; b < sizeof(T); ++b) out[b] = (uint8_t)((uint64_t)v >> (8 * b));
}
template <std::size_t W>
void put_bits_into(uint8_t* out, const VlWide<W>& v) {
    for (std::size_t b = 0; b < 4 * W; ++b) out[b] = (uint8_t)(v[b / 4] >> (8 * (b % 4)));
}

struct Burst { uint64_t addr, beats, ready_at; };

struct Dram {
    std::vector<uint8_t> mem;
    // reads
    std::deque<Burst> reads;
    uint64_t read_beat = 0;          // beats sent of reads.front()
    uint64_t next_read_free = 0;     // earliest clock the next burst's first beat may come
    uint64_t next_beat_at = 0;
    // writes
    std::deque<Burst> writes;        // accepted addresses
    uint64_t write_beat = 0;
    uint64_t next_write_at = 0;
    std::deque<uint64_t> responses;  // clocks at which B responses become valid
    uint64_t bytes_read = 0, bytes_written = 0, bursts = 0;

    uint8_t* at(uint64_t addr, uint64_t n) {
        if (addr + n > mem.size()) mem.resize(addr + n, 0);
        return mem.data() + addr;
    }
};

}  // namespace

#include "design.h"  // TOP_CLASS, BUS_BYTES and dump_state(), generated for this design

struct Run { bool finished; uint64_t cycles; };

// Stream `program` into the TCU at one bus word a clock and clock until it is idle.
// `cycle` counts clocks since reset (the DRAM model keeps absolute times); the run's own clocks
// are returned.
Run run_program(TOP_CLASS& top, Dram* dram, const std::vector<uint8_t>& program, const Options& opt,
                uint64_t& cycle, std::vector<uint8_t>* samples, std::vector<uint64_t>* tracepoints) {
    const size_t bus = BUS_BYTES;
    size_t sent = 0;  // program bytes accepted
    const uint64_t first = cycle;
    bool previous_trace = top.tracepoint;
    while (cycle - first < opt.max_cycles) {
        // --- drive inputs for this clock ---------------------------------------------------------
        bool have_word = sent < program.size();
        top.instruction_tvalid = have_word;
        if (have_word) {
            uint8_t word[BUS_BYTES];
            std::memset(word, 0, sizeof word);
            std::memcpy(word, program.data() + sent, std::min(bus, program.size() - sent));
            set_bits(top.instruction_tdata, word, BUS_BYTES * 8);
            top.instruction_tlast = sent + bus >= program.size();
        }
        top.sample_tready = 1;
        // DRAM slaves: addresses always accepted; read data when due; write data once its burst is known.
#define DRIVE(d, P)                                                                          \
        {                                                                                    \
            Dram& D = dram[d];                                                               \
            top.P##_arready = 1; top.P##_awready = 1;                                        \
            bool rv = !D.reads.empty() && cycle >= D.next_beat_at && cycle >= D.reads.front().ready_at; \
            top.P##_rvalid = rv;                                                             \
            if (rv) {                                                                        \
                Burst& b = D.reads.front();                                                  \
                set_bits(top.P##_rdata, D.at(b.addr + D.read_beat * bus, bus), BUS_BYTES * 8); \
                top.P##_rlast = D.read_beat + 1 == b.beats;                                  \
            }                                                                                \
            top.P##_rresp = 0; top.P##_rid = 0;                                              \
            top.P##_wready = !D.writes.empty() && cycle >= D.next_write_at;                  \
            top.P##_bvalid = !D.responses.empty() && cycle >= D.responses.front();           \
            top.P##_bresp = 0; top.P##_bid = 0;                                              \
        }
        DRIVE(0, m_axi_dram0)
        DRIVE(1, m_axi_dram1)
        top.clock = 0;
        top.eval();

        // --- handshakes seen this clock ------------------------------------------------------------
        if (top.instruction_tvalid && top.instruction_tready) sent += bus;
        if (samples && top.sample_tvalid) put_bits(*samples, (uint64_t)top.sample_tdata, 64);
        if (tracepoints && top.tracepoint && !previous_trace && tracepoints->size() < opt.tracepoint_limit)
            tracepoints->push_back(cycle - first);
        previous_trace = top.tracepoint;
#define ACCEPT(d, P)                                                                         \
        {                                                                                    \
            Dram& D = dram[d];                                                               \
            if (top.P##_arvalid && top.P##_arready) {                                        \
                uint64_t ready = std::max(cycle + opt.latency, D.next_read_free);            \
                D.reads.push_back({top.P##_araddr, (uint64_t)top.P##_arlen + 1, ready});     \
                D.next_read_free = ready + (top.P##_arlen + 1) * opt.beat_cycles + opt.gap;  \
                D.bursts++;                                                                  \
            }                                                                                \
            if (top.P##_rvalid && top.P##_rready) {                                          \
                D.bytes_read += bus;                                                         \
                D.next_beat_at = cycle + opt.beat_cycles;                                    \
                if (++D.read_beat == D.reads.front().beats) { D.reads.pop_front(); D.read_beat = 0; } \
            }                                                                                \
            if (top.P##_awvalid && top.P##_awready) {                                        \
                D.writes.push_back({top.P##_awaddr, (uint64_t)top.P##_awlen + 1, 0});        \
                D.bursts++;                                                                  \
            }                                                                                \
            if (top.P##_wvalid && top.P##_wready) {                                          \
                Burst& b = D.writes.front();                                                 \
                put_bits_into(D.at(b.addr + D.write_beat * bus, bus), top.P##_wdata);        \
                D.bytes_written += bus;                                                      \
                D.next_write_at = cycle + opt.beat_cycles;                                   \
                if (++D.write_beat == b.beats) {                                             \
                    D.responses.push_back(cycle + opt.write_latency);                        \
                    D.writes.pop_front(); D.write_beat = 0;                                  \
                }                                                                            \
            }                                                                                \
            if (top.P##_bvalid && top.P##_bready) D.responses.pop_front();                   \
        }
        ACCEPT(0, m_axi_dram0)
        ACCEPT(1, m_axi_dram1)

        // --- the clock edge (the falling edge needs no evaluation: nothing happens on it) -----------
        top.clock = 1;
        top.eval();
        ++cycle;
        top.clock = 0;
        if (sent >= program.size() && top.idle) return {true, cycle - first};
    }
    return {false, cycle - first};
}

int main(int argc, char** argv) {
    Options opt;
    std::string preamble_path;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string { if (i + 1 >= argc) { std::fprintf(stderr, "missing value for %s\n", a.c_str()); std::exit(2); } return argv[++i]; };
        if (a == "--program") opt.program = next();
        else if (a == "--preamble") preamble_path = next();
        else if (a == "--dram0") opt.dram_in[0] = next();
        else if (a == "--dram1") opt.dram_in[1] = next();
        else if (a == "--dram0-out") opt.dram_out[0] = next();
        else if (a == "--dram1-out") opt.dram_out[1] = next();
        else if (a == "--state-out") opt.state_out = next();
        else if (a == "--samples-out") opt.samples_out = next();
        else if (a == "--max-cycles") opt.max_cycles = std::stoull(next());
        else if (a == "--latency") opt.latency = std::stoull(next());
        else if (a == "--write-latency") opt.write_latency = std::stoull(next());
        else if (a == "--beat-cycles") opt.beat_cycles = std::max<uint64_t>(1, std::stoull(next()));
        else if (a == "--gap") opt.gap = std::stoull(next());
        else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
    }
    auto started = std::chrono::steady_clock::now();
    VerilatedContext context;
    TOP_CLASS top(&context);
    Dram dram[2];
    for (int d = 0; d < 2; ++d) dram[d].mem = read_file(opt.dram_in[d]);
    std::vector<uint8_t> samples;
    std::vector<uint64_t> tracepoints;

    top.reset = 1;  // a few clocks of reset
    for (int i = 0; i < 4; ++i) { top.clock = 0; top.eval(); top.clock = 1; top.eval(); }
    top.clock = 0; top.reset = 0; top.eval();

    uint64_t cycle = 0;
    Run preamble{true, 0};
    if (!preamble_path.empty()) preamble = run_program(top, dram, read_file(preamble_path), opt, cycle, nullptr, nullptr);
    Run run{false, 0};
    if (preamble.finished) run = run_program(top, dram, read_file(opt.program), opt, cycle, &samples, &tracepoints);

    for (int d = 0; d < 2; ++d)
        if (!opt.dram_out[d].empty()) write_file(opt.dram_out[d], dram[d].mem.data(), dram[d].mem.size());
    if (!opt.samples_out.empty()) write_file(opt.samples_out, samples.data(), samples.size());
    if (!opt.state_out.empty()) {
        std::vector<uint8_t> state;
        dump_state(top, state);
        write_file(opt.state_out, state.data(), state.size());
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("{\"finished\": %s, \"cycles\": %llu, \"preamble_cycles\": %llu, \"program_counter\": %llu, "
                "\"error\": %d, \"timeout\": %d, \"seconds\": %.6f, \"dram0_bytes_read\": %llu, "
                "\"dram0_bytes_written\": %llu, \"dram1_bytes_read\": %llu, \"dram1_bytes_written\": %llu, "
                "\"bursts\": %llu, \"tracepoint_cycles\": [",
                run.finished ? "true" : "false", (unsigned long long)run.cycles, (unsigned long long)preamble.cycles,
                (unsigned long long)top.program_counter, (int)top.error, (int)top.timeout, seconds,
                (unsigned long long)dram[0].bytes_read, (unsigned long long)dram[0].bytes_written,
                (unsigned long long)dram[1].bytes_read, (unsigned long long)dram[1].bytes_written,
                (unsigned long long)(dram[0].bursts + dram[1].bursts));
    for (size_t i = 0; i < tracepoints.size(); ++i) std::printf("%s%llu", i ? ", " : "", (unsigned long long)tracepoints[i]);
    std::printf("]}\n");
    top.final();
    return run.finished ? 0 : 4;
}
