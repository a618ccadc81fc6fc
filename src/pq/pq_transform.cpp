#include "pq/pq_transform.h"

#include <cstring>

#include "pq/rotation.h"

namespace aqpim {

void PqTransform::forward_one(const float* x, const float* gain, float* y, float* scratch) const {
    if (!hadamard && !rotation) {  // one pass: y[i] = x[perm[i]] · gain[perm[i]]
        if (!perm) {
            if (gain)
                for (int d = 0; d < D; ++d) y[d] = x[d] * gain[d];
            else if (y != x)
                std::memmove(y, x, sizeof(float) * D);
            return;
        }
        const float* src = x;
        if (x == y) src = static_cast<const float*>(std::memcpy(scratch, x, sizeof(float) * D));
        if (gain)
            for (int i = 0; i < D; ++i) y[i] = src[perm[i]] * gain[perm[i]];
        else
            for (int i = 0; i < D; ++i) y[i] = src[perm[i]];
        return;
    }
    float* t = scratch;  // [D] gain ∘ x, rotated in place by H
    if (gain)
        for (int d = 0; d < D; ++d) t[d] = x[d] * gain[d];
    else
        std::memcpy(t, x, sizeof(float) * D);
    if (hadamard) fwht(t, D);
    if (rotation) {
        matrix_rotate(rotation, D, t, scratch + D, /*transpose=*/false);
        t = scratch + D;
    }
    if (perm)
        for (int i = 0; i < D; ++i) y[i] = t[perm[i]];
    else
        std::memcpy(y, t, sizeof(float) * D);
}

void PqTransform::inverse_one(const float* y, float* x, float* scratch) const {
    const float* gain = query_gain;
    if (!hadamard && !rotation) {  // one pass: x[perm[i]] = y[i] · gain[perm[i]]
        if (!perm) {
            if (gain)
                for (int d = 0; d < D; ++d) x[d] = y[d] * gain[d];
            else if (y != x)
                std::memmove(x, y, sizeof(float) * D);
            return;
        }
        const float* src = y;
        if (x == y) src = static_cast<const float*>(std::memcpy(scratch, y, sizeof(float) * D));
        if (gain)
            for (int i = 0; i < D; ++i) x[perm[i]] = src[i] * gain[perm[i]];
        else
            for (int i = 0; i < D; ++i) x[perm[i]] = src[i];
        return;
    }
    float* t = scratch;  // [D] Pᵀ · y
    if (perm)
        for (int i = 0; i < D; ++i) t[perm[i]] = y[i];
    else
        std::memcpy(t, y, sizeof(float) * D);
    if (rotation) {
        matrix_rotate(rotation, D, t, scratch + D, /*transpose=*/true);
        t = scratch + D;
    }
    if (hadamard) fwht(t, D);
    if (gain)
        for (int d = 0; d < D; ++d) x[d] = t[d] * gain[d];
    else
        std::memcpy(x, t, sizeof(float) * D);
}

}  // namespace aqpim
