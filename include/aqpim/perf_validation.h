#pragma once
// Checking the roofline model against published decode measurements (`aqpim roofline --table
// validate`, docs/roofline.md): batch-1 token generation of 7B/8B models on one GPU, each point a
// preset group naming the model and device presets, the framework (software stack) that ran it, the
// weight bits as stored, the mean context of the run, the measured tokens/s and its source.
//
// The step time of a point is, per component, max(FLOPs / compute, bytes / B) + launches x tau, where
//   B   = min(eff_bw x peak bandwidth,  c_f x SMs x SM clock)   (the GEMV streams at the lower roof)
//   tau = the framework's fixed cost per kernel launch (launch + host-side dispatch + syncs).
// eff_bw (one number for every GPU, bounded to [0.5, 0.93]) is what a well-built GEMV streams; c_f
// (bytes per SM cycle) is an issue roof of the framework's kernels: a GEMV that spends too many
// instructions per byte is bound by SMs x clock, not by DRAM. Both framework factors and eff_bw are
// fitted on the points marked "fit"; the error is reported on those marked "test".

#include <map>
#include <string>
#include <vector>

#include "aqpim/preset.h"

namespace aqpim {

struct DecodeMeasurement {
    std::string id, model, device, split, framework, source;
    double weight_bits = 16;
    std::int64_t context = 1;
    double tokens_per_s = 0;   ///< measured
};

/// Per software stack: what its decode kernels cost beyond streaming the bytes.
struct FrameworkFactors {
    double launch = 0;                   ///< s fixed cost per kernel launch (tau)
    double gemv_bytes_per_sm_cycle = 0;  ///< issue roof c_f: bytes per SM per cycle; 0 = none
};

/// Bounds of the fit (and of what the validation preset may hold).
inline constexpr double kFitEffBandwidthMin = 0.5, kFitEffBandwidthMax = 0.93;
inline constexpr double kFitLaunchMax = 30e-6;
inline constexpr double kFitIssueMin = 1, kFitIssueMax = 256;

struct DecodeFactors {
    double eff_bandwidth = 0;  ///< 0: each device's efficiency.bandwidth
    std::map<std::string, FrameworkFactors> frameworks;
};

/// The points of a validation preset (kind "validation"): group "points", one group per point.
std::vector<DecodeMeasurement> decode_measurements(const Preset& preset);
/// The preset's framework factors (group "frameworks": launch in s, gemv_bytes_per_sm_cycle), with
/// eff_bandwidth 0 (each device's default): the "default" prediction. Every point's framework must
/// be listed.
DecodeFactors decode_defaults(const Preset& preset);

struct DecodePrediction {
    DecodeMeasurement point;
    double predicted_tokens_per_s = 0;
    double error = 0;          ///< predicted / measured - 1
    double bandwidth = 0;      ///< B/s the weights streamed at (after eff_bw and the issue roof)
    double overhead_s = 0;     ///< launches x tau
};

/// Predict every point with the given factors (a framework missing from `factors`: error).
std::vector<DecodePrediction> predict_decode(const std::vector<DecodeMeasurement>& points, const DecodeFactors& factors);

/// The eff_bw in [0.5, 0.93] and, per framework, tau in [0, 30 us] and c_f in [1, 256] B per SM cycle
/// that minimise the squared log error over the points of `split` ("fit"): nested golden-section
/// searches (frameworks are independent once eff_bw is fixed). Frameworks with no point in `split`
/// are absent from the result.
DecodeFactors fit_decode(const std::vector<DecodeMeasurement>& points, const std::string& split);

/// Sum over the points of `split` of log(predicted / measured)^2.
double decode_loss(const std::vector<DecodeMeasurement>& points, const DecodeFactors& factors, const std::string& split);

}  // namespace aqpim
