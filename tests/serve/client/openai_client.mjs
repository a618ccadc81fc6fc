// The official `openai` npm client against a running `aqpim serve` (tests/serve/openai_client_test.sh):
// models, completions and chat, whole and streamed (n = 2 too), and an API error. Exits non-zero on the first
// mismatch, naming it.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

// A third argument `no-cache`: the server runs with --no-cache-prompt; only the next-turn check runs.
const [baseURL, apiKey, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
assert.equal(models.data.length, 1, 'one model listed');
const model = models.data[0].id;

const params = { model, prompt: 'the quick brown fox', max_tokens: 8, temperature: 0.7, seed: 3 };
const whole = await client.completions.create(params);
assert.equal(whole.object, 'text_completion');
assert.equal(whole.choices[0].finish_reason, 'length');
assert.equal(whole.usage.completion_tokens, 8, 'usage.completion_tokens');
assert.ok(whole.usage.prompt_tokens > 0, 'usage.prompt_tokens');

// The next turn sends the text back: the prompt cache continues the sequence (its prompt and 7 of
// its 8 tokens are not prefilled again), unless the server runs without it. Greedy: tokens drawn
// at a temperature may be ones the text does not tokenize back into.
const greedy = await client.completions.create({ ...params, temperature: 0 });
const turn = await client.completions.create({ ...params, prompt: params.prompt + greedy.choices[0].text + ' jumps' });
assert.equal(turn.usage.prompt_tokens_details.cached_tokens, mode === 'no-cache' ? 0 : greedy.usage.prompt_tokens + 7,
             'usage.prompt_tokens_details.cached_tokens of the next turn');
if (mode === 'no-cache') {
  console.log('openai client ok without the prompt cache');
  process.exit(0);
}

let streamed = '';
let finish = null;
for await (const chunk of await client.completions.create({ ...params, stream: true })) {
  streamed += chunk.choices[0]?.text ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.equal(streamed, whole.choices[0].text, 'streamed completion = whole completion');
assert.equal(finish, 'length');

// Scoring as lm-evaluation-harness's local-completions sends it: token-id prompts in a batch,
// echo with logprobs, one token generated; a choice per prompt, the prompt's first token unscored.
const scored = await client.completions.create({ model, prompt: [[1, 40, 41, 42], [1, 43]], max_tokens: 1, temperature: 0,
                                                 logprobs: 1, echo: true, seed: 1234 });
assert.equal(scored.choices.length, 2, 'a choice per prompt');
for (const [i, n] of [[0, 4], [1, 2]]) {
  const c = scored.choices.find((x) => x.index === i);
  assert.equal(c.logprobs.token_logprobs.length, n + 1, `choice ${i}: the prompt's tokens and the generated one`);
  assert.equal(c.logprobs.token_logprobs[0], null, 'nothing predicts the first token');
  assert.ok(c.logprobs.token_logprobs.slice(1).every((x) => x <= 0), 'log probabilities');
}

const chatParams = { model, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 6, seed: 5 };
const chat = await client.chat.completions.create(chatParams);
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices[0].message.role, 'assistant');
let chatStreamed = '';
let role = null;
for await (const chunk of await client.chat.completions.create({ ...chatParams, stream: true, stream_options: { include_usage: true } })) {
  if (chunk.usage) assert.equal(chunk.usage.completion_tokens, chat.usage.completion_tokens, 'stream usage');
  role = chunk.choices[0]?.delta?.role ?? role;
  chatStreamed += chunk.choices[0]?.delta?.content ?? '';
}
assert.equal(role, 'assistant');
assert.equal(chatStreamed, chat.choices[0].message.content, 'streamed chat = whole chat');

// n choices streamed: the client's own accumulator (ChatCompletionStream) rebuilds each choice from
// the chunks by index; they must equal the whole response's choices.
const nParams = { ...chatParams, n: 2, temperature: 1.0 };
const nWhole = await client.chat.completions.create(nParams);
assert.equal(nWhole.choices.length, 2, 'n = 2 choices');
const nFinal = await client.beta.chat.completions.stream(nParams).finalChatCompletion();
assert.equal(nFinal.choices.length, 2, 'n = 2 choices streamed');
for (const i of [0, 1]) {
  const c = nFinal.choices.find((x) => x.index === i);
  assert.equal(c.message.content, nWhole.choices[i].message.content, `streamed choice ${i} = whole choice ${i}`);
  assert.equal(c.finish_reason, nWhole.choices[i].finish_reason, `choice ${i} finish_reason`);
}

// best_of: the client sends it as it is; one choice comes back, one of the three n = 3 gives.
const best = await client.completions.create({ ...params, best_of: 3, n: 1 });
assert.equal(best.choices.length, 1, 'best_of 3, n 1: one choice');
const three = await client.completions.create({ ...params, n: 3 });
assert.ok(three.choices.some((c) => c.text === best.choices[0].text), 'the best is one of the three');
assert.equal(best.usage.completion_tokens, three.usage.completion_tokens, 'usage counts all three');

// Structured outputs: the client's own parse() reads the finished content as JSON (it throws when
// the object is cut short); the schema's order (as the client sent it), enum and types hold.
const schema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, mood: { enum: ['happy', 'sad'] }, age: { type: 'integer' } },
  required: ['name', 'mood', 'age'],
  additionalProperties: false,
};
const structured = await client.beta.chat.completions.parse({
  ...chatParams, max_tokens: 200,
  response_format: { type: 'json_schema', json_schema: { name: 'character', strict: true, schema } },
});
const parsed = structured.choices[0].message.parsed;
assert.deepEqual(Object.keys(parsed), ['name', 'mood', 'age'], `the schema's keys in its order: ${structured.choices[0].message.content}`);
assert.ok(['happy', 'sad'].includes(parsed.mood), `mood from the enum: ${parsed.mood}`);
assert.ok(Number.isInteger(parsed.age) && typeof parsed.name === 'string', 'types');

// vLLM's structured outputs as extra body fields (the client sends them as they are): a choice,
// and a schema's `pattern`.
const chosen = await client.chat.completions.create({
  ...chatParams, max_tokens: 20, structured_outputs: { choice: ['Bath', 'Northanger Abbey', 'Fullerton'] },
});
assert.ok(['Bath', 'Northanger Abbey', 'Fullerton'].includes(chosen.choices[0].message.content),
  `one of the choices: ${chosen.choices[0].message.content}`);
assert.equal(chosen.choices[0].finish_reason, 'stop');
// A GBNF grammar (llama-server's field), nested: bracketed lists of digits.
const listed = await client.chat.completions.create({
  ...chatParams, max_tokens: 60, grammar: 'root ::= list\nlist ::= "[" item ("," item){0,2} "]"\nitem ::= [0-9] | list\n',
});
const listText = listed.choices[0].message.content;
assert.match(listText, /^[\[\]0-9,]*$/, `the grammar's bytes only: ${listText}`);
if (listed.choices[0].finish_reason === 'stop') assert.doesNotThrow(() => JSON.parse(listText), `a finished list is balanced: ${listText}`);
const dated = await client.completions.create({
  ...params, max_tokens: 120,
  structured_outputs: { json: { type: 'object', properties: { year: { type: 'string', pattern: '^1[78]\\d\\d$' } }, required: ['year'] } },
});
if (dated.choices[0].finish_reason === 'stop')
  assert.match(JSON.parse(dated.choices[0].text).year, /^1[78]\d\d$/, `the pattern holds: ${dated.choices[0].text}`);
else
  assert.ok(!/"year"\s*:\s*"(?!1)/.test(dated.choices[0].text), `a cut text still starts the year with 1: ${dated.choices[0].text}`);

// A `format` and a `multipleOf` in a strict schema: a date JavaScript's Date reads back as the same
// calendar day (2023-02-29 would read as 1 March), guests a multiple of 5 within the bounds.
const booked = await client.chat.completions.create({
  ...chatParams, max_tokens: 150,
  response_format: { type: 'json_schema', json_schema: { name: 'booking', strict: true, schema: {
    type: 'object',
    properties: { day: { type: 'string', format: 'date' }, guests: { type: 'integer', multipleOf: 5, minimum: 0, maximum: 100 } },
    required: ['day', 'guests'], additionalProperties: false } } },
});
const bookedText = booked.choices[0].message.content;
if (booked.choices[0].finish_reason === 'stop') {
  const b = JSON.parse(bookedText);
  assert.equal(new Date(`${b.day}T00:00:00Z`).toISOString().slice(0, 10), b.day, `a real calendar day: ${bookedText}`);
  assert.ok(Number.isInteger(b.guests) && b.guests % 5 === 0 && b.guests >= 0 && b.guests <= 100, `a multiple of 5: ${bookedText}`);
} else {
  assert.ok(!/"day"\s*:\s*"\d{4}-(?!0[1-9]|1[0-2])/.test(bookedText), `a cut text still holds a month: ${bookedText}`);
}

// A union of objects told apart by a const (zod's discriminatedUnion, pydantic's Cat | Dog): the
// client's parse() reads a pet that is exactly one of them, its keys in that branch's order.
const petBranch = (kind, count, max) => ({
  type: 'object', additionalProperties: false, required: ['kind', count],
  properties: { kind: { type: 'string', const: kind }, [count]: { type: 'integer', minimum: 0, maximum: max } },
});
const pets = await client.beta.chat.completions.parse({
  ...chatParams, max_tokens: 100,
  response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: {
    type: 'object', additionalProperties: false, required: ['pet'],
    properties: { pet: { anyOf: [petBranch('cat', 'lives', 9), petBranch('fish', 'fins', 8)] } } } } },
});
const pet = pets.choices[0].message.parsed.pet;
const petKeys = Object.keys(pet).join(',');
assert.ok((petKeys === 'kind,lives' && pet.kind === 'cat' && pet.lives <= 9) ||
          (petKeys === 'kind,fins' && pet.kind === 'fish' && pet.fins <= 8), `one branch whole: ${pets.choices[0].message.content}`);

// Reasoning (the server runs with --reasoning-format deepseek): <think>...</think> comes back as
// message.reasoning_content, and streamed as delta.reasoning_content before the content.
const thought = '<think>Bath or York?</think>\n\nBath.';
const reasoned = await client.chat.completions.create({ ...chatParams, max_tokens: 40, guided_choice: [thought] });
assert.equal(reasoned.choices[0].message.reasoning_content, 'Bath or York?');
assert.equal(reasoned.choices[0].message.content, 'Bath.');
let streamedReasoning = '', streamedContent = '';
for await (const chunk of await client.chat.completions.create({ ...chatParams, max_tokens: 40, guided_choice: [thought], stream: true })) {
  const delta = chunk.choices[0]?.delta ?? {};
  if (delta.reasoning_content) assert.equal(streamedContent, '', 'reasoning before content');
  streamedReasoning += delta.reasoning_content ?? '';
  streamedContent += delta.content ?? '';
}
assert.deepEqual([streamedReasoning, streamedContent], ['Bath or York?', 'Bath.']);

// A named tool call: the client reads message.tool_calls (its arguments a JSON text).
const weather = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { town: { type: 'string', maxLength: 8 } }, required: ['town'] } },
};
const called = await client.chat.completions.create({
  ...chatParams, max_tokens: 200, tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } },
});
if (called.choices[0].finish_reason === 'stop') {
  const call = called.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.function.arguments).town, 'string', `arguments: ${call.function.arguments}`);
} else {
  assert.equal(called.choices[0].finish_reason, 'length');
}

// tool_choice "required" among two tools (one call: parallel_tool_calls false): a call of either,
// with that tool's own arguments.
const letter = {
  type: 'function',
  function: { name: 'send_letter', parameters: { type: 'object', properties: { urgent: { type: 'boolean' } }, required: ['urgent'] } },
};
const anyCall = await client.chat.completions.create({
  ...chatParams, max_tokens: 120, tools: [weather, letter], tool_choice: 'required', parallel_tool_calls: false,
});
if (anyCall.choices[0].finish_reason === 'tool_calls') {
  const call = anyCall.choices[0].message.tool_calls[0];
  const args = JSON.parse(call.function.arguments);
  assert.ok((call.function.name === 'get_weather' && typeof args.town === 'string') ||
            (call.function.name === 'send_letter' && typeof args.urgent === 'boolean'), `the named tool's arguments: ${JSON.stringify(call)}`);
} else {
  assert.equal(anyCall.choices[0].finish_reason, 'length');
}

// Two calls in Hermes' tags after some content, written through a one-choice constraint (allowed
// beside tool_choice "auto") as a tool-calling model writes them: the client reads both calls and
// the content; streamed as an array, the client's own accumulator (beta.chat.completions.stream)
// builds the same calls from the deltas.
const hermes = 'Hm.<tool_call>{"name": "get_weather", "arguments": {"town": "Bath"}}</tool_call>'
  + '<tool_call>{"name": "get_weather", "arguments": {"town": "York"}}</tool_call>';
const two = await client.chat.completions.create({ ...chatParams, max_tokens: 190, tools: [weather], guided_choice: [hermes] });
assert.equal(two.choices[0].finish_reason, 'tool_calls', JSON.stringify(two.choices[0]));
assert.equal(two.choices[0].message.content, 'Hm.');
assert.deepEqual(two.choices[0].message.tool_calls.map((c) => JSON.parse(c.function.arguments).town), ['Bath', 'York']);
const array = '[{"name": "get_weather", "arguments": {"town": "Ely"}}, {"name": "get_weather", "arguments": {"town": "Wells"}}]';
const callStream = client.beta.chat.completions.stream({ ...chatParams, max_tokens: 190, tools: [weather], guided_choice: [array] });
const final = await callStream.finalChatCompletion();
assert.equal(final.choices[0].finish_reason, 'tool_calls');
assert.deepEqual(final.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments).town]),
  [['get_weather', 'Ely'], ['get_weather', 'Wells']]);

await assert.rejects(client.completions.create({ ...params, temperature: 5 }), (e) => {
  assert.ok(e instanceof OpenAI.BadRequestError, `a 400 BadRequestError, got ${e}`);
  assert.match(e.message, /temperature/);
  return true;
});
const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);

console.log(`openai client ok: ${model}, completion ${JSON.stringify(whole.choices[0].text)}, chat ${JSON.stringify(chat.choices[0].message.content)}`);
