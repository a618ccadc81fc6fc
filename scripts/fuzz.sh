#!/usr/bin/env bash
# Build the libFuzzer targets (clang-14, ASan + UBSan, build-fuzz/) and fuzz them:
#   scripts/fuzz.sh [TARGET|all] [SECONDS]      e.g. scripts/fuzz.sh gguf 60
# SECONDS are wall seconds; with AQPIM_FUZZ_BUDGET=cpu they are the fuzzer's CPU seconds (a campaign
# of "20 CPU-minutes per target" on a shared machine: the fuzzer runs until it has had them).
# TARGET is a fuzz/fuzz_TARGET.cpp name (gguf, safetensors, llama2c, vocab, presets, kv_trace,
# kv_scheme, pq_file, kv_state, openai_request, kv_block, json_schema, regex, grammar); default all, 30 s each. Corpora grow in
# fuzz-corpus/TARGET (ignored by git), seeded at run time from ../shared (or $AQPIM_SHARED),
# presets/, hand-written requests and the `aqpim` command's own output (synth, convert,
# run --trace/--save-state: $AQPIM, else build/bin/aqpim, else $build/bin/aqpim).
# Limits: -rss_limit_mb/-malloc_limit_mb 2048 (no input may make us allocate 2 GiB), -timeout
# $AQPIM_FUZZ_TIMEOUT (default 1 s per input, over 1 s is a hang). Crashes go to
# fuzz-corpus/TARGET-crashes/; the run prints execs/s, coverage and the crash count of each target
# and exits 1 if any target crashed. Runs at nice 19 (the development machine is shared).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/sanitizer_build.sh

target=${1:-all}
seconds=${2:-30}
budget=${AQPIM_FUZZ_BUDGET:-wall}
case $budget in wall|cpu) ;; *) echo "fuzz.sh: AQPIM_FUZZ_BUDGET must be wall or cpu, not '$budget'" >&2; exit 2 ;; esac
build=${AQPIM_FUZZ_BUILD:-build-fuzz}
shared=${AQPIM_SHARED:-../shared}
# The command that makes the seeds: $AQPIM, else the README's build/bin/aqpim, else the fuzz build's
# own (ASan) aqpim, built with the targets.
aqpim=${AQPIM:-build/bin/aqpim}
extra_targets=
if [ -z "${AQPIM:-}" ] && [ ! -x "$aqpim" ]; then aqpim=$build/bin/aqpim extra_targets=aqpim_cli; fi
timeout_s=${AQPIM_FUZZ_TIMEOUT:-1}
all_targets=$(ls fuzz/fuzz_*.cpp | sed 's|fuzz/fuzz_||; s|\.cpp$||')
targets=$([ "$target" = all ] && echo "$all_targets" || echo "$target")

# AQPIM_FUZZ_NO_BUILD=1: use the targets already in $build (e.g. a second fuzz.sh running other
# targets beside a first one, which must not rebuild the same directory at the same time).
if [ "${AQPIM_FUZZ_NO_BUILD:-0}" != 1 ]; then
    configure_sanitizer_build "$build" -DAQPIM_FUZZ=ON
    nice -n 19 cmake --build "$build" -j "$AQPIM_BUILD_JOBS" --target $(for t in $targets; do echo "fuzz_$t"; done) $extra_targets
fi

sep=$'\n--aqpim-fuzz-part--\n'
# cat_parts OUT FILE... : the files joined by the part separator (fuzz/fuzz_input.h)
cat_parts() {
    local out=$1; shift
    local first=1
    : > "$out"
    for f in "$@"; do
        [ $first = 1 ] || printf '%s' "$sep" >> "$out"
        first=0
        cat "$f" >> "$out"
    done
}
have() { [ -e "$shared/$1" ]; }
have_aqpim() { [ -x "$aqpim" ]; }

# seed TARGET DIR: (re)generate the run-time seeds of a target into DIR
seed() {
    local t=$1 dir=$2 tmp
    tmp=$(mktemp -d)
    case $t in
    gguf)
        have models/stories260K/stories260K.gguf && cp "$shared/models/stories260K/stories260K.gguf" "$dir/"
        if have_aqpim; then
            for type in f32 f16 q8_0 q4_0; do
                nice -n 19 "$aqpim" synth --shape custom --hidden 64 --ffn 128 --heads 4 --kv-heads 2 --head-dim 16 \
                    --layers 1 --vocab 64 --ctx 64 --type $type -o "$dir/synth-$type.gguf" >/dev/null 2>&1 || true
            done
            have models/tinystories-656k && nice -n 19 "$aqpim" convert -m "$shared/models/tinystories-656k" --type q8_0 \
                -o "$dir/tinystories-q8_0.gguf" >/dev/null 2>&1 || true
        fi ;;
    safetensors)
        if have models/tinystories-656k; then
            local m=$shared/models/tinystories-656k
            cat_parts "$dir/tinystories" "$m/config.json" "$m/model.safetensors"
            cat_parts "$dir/tinystories-tok" "$m/config.json" "$m/model.safetensors" "$m/tokenizer.json"
            # the header alone (8-byte length + JSON): the part a hostile file controls
            local n; n=$(/usr/bin/python3 -c "import struct,sys;print(8+struct.unpack('<Q',open(sys.argv[1],'rb').read(8))[0])" "$m/model.safetensors")
            head -c "$n" "$m/model.safetensors" > "$tmp/header"
            cat_parts "$dir/tinystories-header" "$m/config.json" "$tmp/header"
        fi
        have models/austen-13m/config.json && { head -c 4096 "$shared/models/austen-13m/model.safetensors" > "$tmp/a"
            cat_parts "$dir/austen-header" "$shared/models/austen-13m/config.json" "$tmp/a"; } ;;
    llama2c)
        have models/stories260K && cat_parts "$dir/stories260K" "$shared/models/stories260K/stories260K.bin" \
            "$shared/models/stories260K/tok512.bin" ;;
    vocab)
        printf 'Once upon a time, there was a little girl. \xe2\x80\x94 caf\xc3\xa9 \xf0\x9f\x99\x82\n\t  x' > "$tmp/text"
        have models/tinystories-656k && { printf 'tokenizer.json' > "$tmp/n"; cat_parts "$dir/json" "$tmp/n" \
            "$shared/models/tinystories-656k/tokenizer.json" "$tmp/text" "$shared/models/tinystories-656k/tokenizer_config.json"; }
        have models/austen-13m && { printf 'tokenizer.model' > "$tmp/n"; cat_parts "$dir/spm" "$tmp/n" \
            "$shared/models/austen-13m/tokenizer.model" "$tmp/text"; }
        have models/stories260K && { printf 'tokenizer.bin:512' > "$tmp/n"; cat_parts "$dir/llama2c" "$tmp/n" \
            "$shared/models/stories260K/tok512.bin" "$tmp/text"; } ;;
    presets)
        for f in presets/*/*.json; do cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"; done ;;
    kv_trace)
        if have_aqpim && have models/stories260K; then
            for kv in f16 pq:calib=8 kivi2; do
                nice -n 19 "$aqpim" -t 1 run -m "$shared/models/stories260K/stories260K.bin" -p 'Once upon' -n 12 --kv "$kv" \
                    --trace "$dir/trace-${kv%%:*}.jsonl" >/dev/null 2>&1 || true
            done
        fi ;;
    kv_scheme)
        local i=0
        for s in f32 f16 int8 int4:g=64 q8_0 q4_0 'kivi2:g=32,window=128' pq 'pq:m=32,nbits=4,calib=256' \
                 'pq:m=16,bits=2' 'pq:f16_layers=0+1+4-7' 'turbo:bits=3.5' 'qjl:m=256,values=int2' 'f16;q4_0;int3'; do
            printf '%s' "$s" > "$dir/scheme$((i++))"
        done ;;
    pq_file)
        AQPIM_FUZZ_WRITE_SEEDS=$dir nice -n 19 "$build/fuzz/fuzz_pq_file" >/dev/null 2>&1 || true ;;
    kv_block)
        AQPIM_FUZZ_WRITE_SEEDS=$dir nice -n 19 "$build/fuzz/fuzz_kv_block" >/dev/null 2>&1 || true ;;
    json_schema)
        AQPIM_FUZZ_WRITE_SEEDS=$dir nice -n 19 "$build/fuzz/fuzz_json_schema" >/dev/null 2>&1 || true ;;
    regex)
        AQPIM_FUZZ_WRITE_SEEDS=$dir nice -n 19 "$build/fuzz/fuzz_regex" >/dev/null 2>&1 || true ;;
    grammar)
        AQPIM_FUZZ_WRITE_SEEDS=$dir nice -n 19 "$build/fuzz/fuzz_grammar" >/dev/null 2>&1 || true ;;
    kv_state)
        if have_aqpim && have models/stories260K; then
            for kv in f16 f32 int8 q4_0 kivi2 pq:calib=8 pq:calib=8,cb=int8 pq:calib=8,cb=f16 turbo qjl; do
                nice -n 19 "$aqpim" -t 1 run -m "$shared/models/stories260K/stories260K.bin" -p 'Once upon' -n 12 --kv "$kv" \
                    --save-state "$dir/state-${kv//[:=,]/_}.kvs" >/dev/null 2>&1 || true
            done
        fi ;;
    openai_request)
        # ENDPOINT SEP body: the request shapes of docs/serve.md, one per field group
        local i=0 body
        while IFS= read -r body; do
            printf 'completions%s%s' "$sep" "$body" > "$dir/completions$((i++))"
        done <<'BODIES'
{"model":"m","prompt":"Once upon a time","max_tokens":16,"temperature":0.7,"top_p":0.9,"seed":42}
{"prompt":["Once"],"stop":["\n","."],"stream":true,"stream_options":{"include_usage":true},"logprobs":2}
{"prompt":[1,2,3,511],"n":1,"best_of":1,"echo":false,"suffix":"","logit_bias":{},"frequency_penalty":0,"presence_penalty":0.0}
{"prompt":"x","id_slot":0,"keep_slot":true,"user":"u","stop":null}
{"prompt":[[1,2,3],[4,5]],"echo":true,"logprobs":1,"max_tokens":0,"seed":1234}
{"prompt":["a","b"],"echo":true,"max_tokens":1,"temperature":0}
{"prompt":["a","b"],"n":2,"stream":true,"response_format":{"type":"json_object"}}
{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"c","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string","maxLength":4},"b":{"anyOf":[{"type":"integer"},{"type":"null"}]},"c":{"$ref":"#/$defs/c"}},"required":["a"],"$defs":{"c":{"enum":["x",1]}}}}}}
{"prompt":"x","response_format":{"type":"json_object","schema":{"type":"object","additionalProperties":{"type":"array","items":{"type":"boolean"},"maxItems":3}}}}
{"prompt":"x","structured_outputs":{"regex":"[A-Z][a-z]+( [a-z]+){1,4}[.!]"}}
{"prompt":"x","guided_choice":["yes","no","perhaps (so)"],"n":2}
{"prompt":["def f(a):\n    ",[1,2]],"suffix":"\n    return a\n","max_tokens":8}
{"prompt":"x","structured_outputs":{"json":{"type":"object","properties":{"d":{"type":"string","pattern":"^\\d{4}-\\d{2}$"}}}}}
{"prompt":"x","guided_json":"{\"type\":\"object\"}","guided_regex":null}
{"prompt":"x","grammar":"root ::= item (\" \" item){0,3}\nitem ::= [a-z]{1,8} | \"(\" root \")\""}
{"prompt":"x","structured_outputs":{"grammar":"root ::= [0-9]+"},"guided_grammar":null}
BODIES
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"t\":\"Bath\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"rain"}],"tools":[{"type":"function","function":{"name":"w","description":"d","parameters":{"type":"object","properties":{"t":{"type":"string","maxLength":8}},"required":["t"]}}},{"type":"function","function":{"name":"v"}}],"tool_choice":"required","parallel_tool_calls":false}' > "$dir/chat-tools"
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w"}}],"tool_choice":{"type":"function","function":{"name":"w"}}}' > "$dir/chat-tool-named"
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}},{"type":"function","function":{"name":"b","parameters":{"$defs":{"K":{"enum":["p","q"]}},"type":"object","properties":{"k":{"$ref":"#/$defs/K"}}}}}],"tool_choice":"required"}' > "$dir/chat-tools-parallel"
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"u","schema":{"type":"object","properties":{"pet":{"oneOf":[{"type":"object","properties":{"t":{"const":"cat"},"m":{"type":"integer"}},"required":["t"]},{"type":"object","properties":{"t":{"const":"dog"},"m":{"type":"object"}},"required":["t"]}]}}}}}}' > "$dir/chat-union"
        # llama-server's own /completion and /infill
        while IFS= read -r body; do
            printf 'completion%s%s' "$sep" "$body" > "$dir/llama$((i++))"
        done <<'BODIES'
{"prompt":"Once upon","n_predict":16,"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,"seed":-1,"stop":["
"],"stream":true,"n_probs":2}
{"prompt":[[1,2,"x",3],"y"],"samplers":["penalties","top_k","top_p","temperature"],"repeat_penalty":1.1,"repeat_last_n":-1,"logit_bias":[[5,false],["ab",1.5]],"ignore_eos":true}
{"prompt":"x","samplers":"kpmt","typical_p":1,"mirostat":0,"dry_multiplier":0,"dry_sequence_breakers":["
"],"xtc_probability":0,"min_keep":0,"return_tokens":true,"response_fields":["content","timings/prompt_n"],"cache_prompt":true,"n_keep":-1}
{"prompt":"x","grammar":"root ::= [a-z]+","n_predict":-1,"timings_per_token":true,"id_slot":-1,"lora":[]}
BODIES
        printf 'infill%s%s' "$sep" '{"input_prefix":"def f(a):\n    ","input_suffix":"\n    return a\n","input_extra":[{"filename":"u.py","text":"x = 1"},{"text":"y"}],"prompt":"re","n_indent":4,"t_max_predict_ms":500,"samplers":["top_k","top_p"]}' > "$dir/infill0"
        printf 'tokenize%s%s' "$sep" '{"prompt":"Once upon","add_special_tokens":false}' > "$dir/tokenize0"
        printf 'tokenize%s%s' "$sep" '{"content":"Once upon","add_special":true,"model":"m"}' > "$dir/tokenize1"
        printf 'detokenize%s%s' "$sep" '{"tokens":[1,2,3,511]}' > "$dir/detokenize0"
        for f in plain llama2 llama3 chatml mistral gemma phi3 phi4 deepseek; do
            printf 'chat:%s%s%s' "$f" "$sep" '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":[{"type":"text","text":"Tell "},{"type":"text","text":"a story"}]}],"max_completion_tokens":8,"logprobs":true,"top_logprobs":3,"response_format":{"type":"text"}}' > "$dir/chat-$f"
        done
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude42","name":"n"}],"max_tokens":4,"stream":true}' > "$dir/chat-unicode"
        printf 'chat%s%s' "$sep" '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false},"guided_choice":["a","b"]}' > "$dir/chat-thinking"
        # Finished answers read as tool calls (tool_calls_of), one per form.
        printf 'answer%s%s' "$sep" 'Checking.<tool_call>{"name": "get_weather", "arguments": {"town": "Bath"}}</tool_call>
<tool_call>{"name": "f", "arguments": {}}' > "$dir/answer-hermes"
        printf 'answer%s%s' "$sep" '[TOOL_CALLS] [{"name": "f", "arguments": "{\"a\": 1}"}, {"get_weather": {}}]' > "$dir/answer-array"
        printf 'answer%s%s' "$sep" '<|python_tag|>{"name": "get_weather", "parameters": {"town": "York"}}' > "$dir/answer-llama"
        printf 'answer%s%s' "$sep" 'So.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
```json
{"town": "Bath"}
```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' > "$dir/answer-deepseek" ;;
    esac
    rm -rf "$tmp"
}

failed=0
printf '%-14s %8s %8s %10s %8s %8s %8s %8s %s\n' target seconds cpu_s execs execs/cpu_s cov ft starved crashes
for t in $targets; do
    corpus=fuzz-corpus/$t crashes=fuzz-corpus/$t-crashes seeds=fuzz-corpus/$t-seeds
    mkdir -p "$corpus" "$crashes" "$seeds"
    seed "$t" "$seeds"
    dict=()
    case $t in gguf) dict=(-dict=fuzz/gguf.dict) ;; safetensors|vocab|presets|kv_trace) dict=(-dict=fuzz/json.dict) ;;
        kv_scheme) dict=(-dict=fuzz/kv_scheme.dict) ;; openai_request|json_schema) dict=(-dict=fuzz/openai.dict) ;;
        regex) dict=(-dict=fuzz/regex.dict) ;; grammar) dict=(-dict=fuzz/grammar.dict) ;; esac
    log=fuzz-corpus/$t.log starved=fuzz-corpus/$t-starved
    mkdir -p "$starved"
    set +e
    started=$SECONDS cpu=0 execs=0 n_starved=0 rc=0
    # libFuzzer's -timeout is wall time: a nice-19 fuzzer starved by other work on the machine times
    # out on inputs that run in milliseconds. Each timeout input is replayed at once at normal
    # priority; one that runs within the limit is moved to fuzz-corpus/TARGET-starved/ (counted, not a
    # finding) and the fuzzer resumes for the seconds left; one that times out again is a hang.
    while :; do
        # seconds left of the budget (CPU seconds never exceed wall seconds, so a run given the CPU
        # seconds left as its wall limit cannot overshoot)
        left=$([ "$budget" = cpu ] && echo $((seconds - cpu)) || echo $((seconds - (SECONDS - started))))
        [ "$left" -gt 0 ] || break
        TIMEFORMAT='%U %S'  # CPU seconds (user + system): on a shared machine wall seconds overstate the work
        t_cpu=$( { time nice -n 19 "$build/fuzz/fuzz_$t" "$corpus" "$seeds" "${dict[@]}" -max_total_time="$left" \
            -timeout="$timeout_s" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=4194304 \
            -artifact_prefix="$crashes/" -print_final_stats=1 > "$log" 2>&1; } 2>&1 )
        rc=$?
        cpu=$(echo "$t_cpu" | tail -1 | awk -v c="$cpu" '{printf "%.0f", c + $1 + $2}')
        execs=$((execs + $(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 | grep . || echo 0)))
        # the run's time ran out: the wall budget is spent; a CPU budget may not be (starved runs)
        if [ "$rc" = 0 ]; then [ "$budget" = cpu ] && continue; break; fi
        # resume only when this stop left files and every one was a starved timeout (a fuzzer that
        # failed without leaving an input keeps its exit status)
        replayed=0 other=0
        for f in $(find "$crashes" -type f); do
            if [[ $(basename "$f") == timeout-* ]] && "$build/fuzz/fuzz_$t" "$f" -timeout="$timeout_s" -runs=1 >/dev/null 2>&1; then
                mv "$f" "$starved/"; n_starved=$((n_starved + 1)) replayed=$((replayed + 1))
            else
                other=1
            fi
        done
        [ "$replayed" -gt 0 ] && [ "$other" = 0 ] || break
        cp "$log" "$log.starved-$n_starved"
        rc=0
    done
    ran=$((SECONDS - started))  # wall seconds fuzzed (less than asked when a finding stopped it)
    set -e
    rate=$([ "$cpu" -gt 0 ] && echo $((execs / cpu)) || echo -)  # per CPU second
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)  # none when the first input stopped it
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
    n_crash=$(find "$crashes" -type f | wc -l)
    printf '%-14s %8s %8s %10s %8s %8s %8s %8s %s\n' "$t" "$ran" "$cpu" "$execs" "$rate" "${cov:-?}" "${ft:-?}" "$n_starved" "$n_crash"
    if [ "$rc" != 0 ] || [ "$n_crash" != 0 ]; then
        failed=1
        echo "  fuzz_$t: exit $rc, $n_crash file(s) in $crashes; log: $log" >&2
        grep -m5 -E 'ERROR|SUMMARY|deadly|uncaught|out-of-memory|timeout' "$log" | sed 's/^/  /' >&2 || true
    fi
done
exit $failed
