"""infer_llama --serve driven by real HTTP clients: the official `openai` package and curl.

A tiny model is trained first with train_llama (one step on a few Jane Austen paragraphs), so the
server runs a real Hugging Face directory with a real SentencePiece tokenizer. Greedy outputs
through the server are compared with infer_llama's own command-line output for the same prompt.

Run by CTest (see tests/CMakeLists.txt) with the build's apps directory in COLOSSAL_APPS.
"""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import client, free_port, start_server

APPS = os.environ["COLOSSAL_APPS"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    # A few hundred paragraphs of the built-in corpus and a tiny model, trained for a few steps.
    cfg = d / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "num_key_value_heads": 2,
                               "max_position_embeddings": 256, "vocab_size": 600}))
    subprocess.run([f"{APPS}/train_llama", "--output", str(d), "--model_config", str(cfg), "--vocab_size", "600",
                    "--max_steps", "5", "--batch_size", "2", "--max_length", "64", "--eval_interval", "-1",
                    "--sample_tokens", "0"], check=True, capture_output=True)
    return d / "model"


@pytest.fixture(scope="module")
def server(model_dir):
    port = free_port()
    base, proc = start_server(model_dir, "--served_model_name", "tiny")
    yield base, proc
    if proc.poll() is None:
        proc.kill()


def cli_greedy(model_dir, prompt, n):
    out = subprocess.run([f"{APPS}/infer_llama", "--model", str(model_dir), "--prompt", prompt,
                          "--max_new_tokens", str(n), "--temperature", "0", "--repetition_penalty", "1",
                          "--threads", "1"], check=True, capture_output=True, text=True)
    return out.stdout.rstrip("\n")[len(prompt):]


def test_models_health_and_completion_match_the_cli(server, model_dir):
    base, _ = server
    c = client(base)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    r = c.completions.create(model="tiny", prompt="It is a truth", max_tokens=12, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text == cli_greedy(model_dir, "It is a truth", 12)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 0


def test_streaming_completion_and_chat(server):
    base, _ = server
    c = client(base)
    whole = c.completions.create(model="tiny", prompt="Elizabeth", max_tokens=10, temperature=0).choices[0].text
    pieces = [ch.choices[0].text for ch in
              c.completions.create(model="tiny", prompt="Elizabeth", max_tokens=10, temperature=0, stream=True)]
    assert "".join(pieces) == whole
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hello"}],
                                     max_tokens=8, temperature=0)
    assert chat.choices[0].message.role == "assistant"
    streamed = "".join((ch.choices[0].delta.content or "") for ch in c.chat.completions.create(
        model="tiny", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
        max_tokens=8, temperature=0, stream=True))
    assert streamed == chat.choices[0].message.content
    # curl sees server-sent events ending in [DONE].
    out = subprocess.run(["curl", "-sN", base + "/v1/completions", "-H", "Content-Type: application/json",
                          "-d", json.dumps({"prompt": "Mr.", "max_tokens": 4, "stream": True})],
                         check=True, capture_output=True, text=True).stdout
    events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("length", "stop")


def post(base, path, body):
    """(status, parsed JSON body) of a raw POST: bodies the typed client would refuse to send."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "x", "temperature": 3}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "n": 65}, "n"),
    ({"prompt": "x", "stop": [1, 2]}, "stop"),
    ({"prompt": 5}, "prompt"),
    ({}, "prompt"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "word " * 400}, "prompt"),  # longer than max_position_embeddings
])
def test_bad_requests_get_400_and_the_server_keeps_serving(server, body, param):
    base, _ = server
    status, err = post(base, "/v1/completions", body)
    assert status == 400, err
    assert err["error"]["param"] == param, err
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["message"]
    # The typed client sees the same as an exception, and the server still serves.
    if param == "temperature":
        with pytest.raises(openai.BadRequestError):
            client(base).completions.create(model="tiny", **body)
    assert client(base).completions.create(model="tiny", prompt="ok", max_tokens=2).choices


def test_bad_json_wrong_model_and_chat_errors(server):
    base, _ = server
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", base + "/v1/completions", "-d", "{bad"],
                         capture_output=True, text=True).stdout.splitlines()
    assert out[-1] == "400" and "not valid JSON" in json.loads(out[0])["error"]["message"]
    with pytest.raises(openai.NotFoundError):
        client(base).completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError):
        client(base).chat.completions.create(model="tiny", messages=[{"role": "assistant", "content": "hi"}])


def test_64_concurrent_requests_all_complete_with_the_right_outputs(server, model_dir):
    base, _ = server
    prompts = [f"Chapter {i}" for i in range(64)]
    # Each prompt alone first: the reference every batched answer must equal.
    expected = {p: client(base).completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0).choices[0].text
                for p in prompts}

    def one(p):
        return p, client(base).completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = dict(pool.map(one, prompts))
    assert len(results) == 64
    for p, text in expected.items():
        assert results[p] == text, "batched output differs from the output alone"
    metrics = urllib.request.urlopen(base + "/metrics").read().decode()
    assert "colossal_kv_blocks_used" in metrics and "colossal_time_to_first_token_seconds_bucket" in metrics


def metric(base, name):
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_prefix_caching_serves_a_shared_prompt_with_the_same_greedy_text(server, model_dir):
    """Automatic prefix caching (on by default): a second request with the same long prompt takes
    the first one's KV blocks (counted in /metrics) and answers with the same greedy text as the
    command line, which computes everything."""
    base, _ = server
    prompt = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be "
              "in want of a wife. However little known the feelings or views of such a man may be")
    want = cli_greedy(model_dir, prompt, 12)
    hits = metric(base, "colossal_prefix_cache_hits_total")
    texts = [client(base).completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0,
                                             extra_body={"repetition_penalty": 1}).choices[0].text for _ in range(2)]
    assert texts == [want, want]
    assert metric(base, "colossal_prefix_cache_hits_total") - hits >= 32, "two blocks of 16 at least"
    assert metric(base, "colossal_prefix_cache_queries_total") > 0
    assert metric(base, "colossal_prefix_cache_blocks") > 0


def test_n_choices_share_the_prompt_and_stream_with_their_indices(server, model_dir):
    """n > 1: one request, n choices. Greedy choices are all the command line's text; seeded
    sampled choices differ from each other and repeat with the seed; the prompt is prefilled once
    (the other choices take its blocks from the prefix cache); streamed chunks carry each choice's
    index and finish reason, then one [DONE]."""
    base, _ = server
    c = client(base)
    prompt = "She was the youngest of the two daughters of a most affectionate, indulgent father; and had"
    want = cli_greedy(model_dir, prompt, 8)
    r = c.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0, n=3,
                             extra_body={"repetition_penalty": 1})
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    assert [ch.text for ch in r.choices] == [want] * 3
    assert r.usage.completion_tokens > 0 and r.usage.completion_tokens % 3 == 0, "summed over three equal choices"
    hits = metric(base, "colossal_prefix_cache_hits_total")
    sampled = c.completions.create(model="tiny", prompt=prompt + " a", max_tokens=16, temperature=1.0, n=4, seed=7)
    texts = [ch.text for ch in sorted(sampled.choices, key=lambda ch: ch.index)]
    assert len(set(texts)) > 1, "seeded choices draw differently"
    assert metric(base, "colossal_prefix_cache_hits_total") - hits >= 3 * 16, "choices 1..3 share the prompt"
    again = c.completions.create(model="tiny", prompt=prompt + " a", max_tokens=16, temperature=1.0, n=4, seed=7)
    assert [ch.text for ch in sorted(again.choices, key=lambda ch: ch.index)] == texts
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=4,
                                     n=2, temperature=0)
    assert [ch.index for ch in chat.choices] == [0, 1] and chat.choices[0].message.content == \
        chat.choices[1].message.content
    finishes, indices = {}, set()
    stream = c.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0, n=2, stream=True,
                                  extra_body={"repetition_penalty": 1})
    text = {0: "", 1: ""}
    for chunk in stream:
        for ch in chunk.choices:
            indices.add(ch.index)
            text[ch.index] += ch.text
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    assert indices == {0, 1} and set(finishes) == {0, 1}
    assert text[0] == text[1] == cli_greedy(model_dir, prompt, 6)


def test_disconnected_client_frees_its_blocks(server):
    base, _ = server
    # Start a long stream, read one event, hang up.
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(
        {"prompt": "It was", "max_tokens": 200, "stream": True, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json"})
    resp = urllib.request.urlopen(req)
    resp.readline()
    resp.close()
    for _ in range(100):
        m = urllib.request.urlopen(base + "/metrics").read().decode()
        used = [line for line in m.splitlines() if line.startswith("colossal_kv_blocks_used ")]
        if used and used[0].split()[1] == "0":
            break
        time.sleep(0.1)
    else:
        pytest.fail("blocks still in use after the client left:\n" + m)


def test_sigterm_drains_in_flight_requests_then_exits(model_dir):
    base, proc = start_server(model_dir)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(lambda: client(base).completions.create(
            model="model", prompt="It was", max_tokens=60, temperature=0, extra_body={"ignore_eos": True}))
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        r = fut.result(timeout=60)
    assert r.choices[0].finish_reason == "length"
    assert proc.wait(timeout=30) == 0


def raw_post(base, path, data, method="POST"):
    """(status, headers, parsed JSON body) for bytes sent as they are."""
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def test_invalid_utf8_wrong_method_and_oversized_bodies(model_dir):
    base, proc = start_server(model_dir, "--max_body_mib", "0.05")
    try:
        # A byte that is not UTF-8 inside the prompt: a 400 naming the field (it was a 500 "no route").
        status, _, err = raw_post(base, "/v1/completions", b'{"max_tokens": 2, "prompt": "caf\xe9 au lait"}')
        assert status == 400, err
        assert err["error"]["param"] == "prompt", err
        assert "not valid UTF-8 (byte 32, in the value of \"prompt\")" in err["error"]["message"], err
        # The wrong method on a known path.
        status, headers, err = raw_post(base, "/v1/completions", None, method="GET")
        assert status == 405 and headers["Allow"] == "POST", err
        assert "GET is not allowed on /v1/completions" in err["error"]["message"]
        status, headers, _ = raw_post(base, "/health", b"{}")
        assert status == 405 and headers["Allow"] == "GET"
        # A body over --max_body_mib (0.05 MiB) is refused with a 413 before it is parsed.
        big = json.dumps({"prompt": "x" * 200_000}).encode()
        out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                              "--data-binary", "@-", base + "/v1/completions"], input=big, capture_output=True)
        lines = out.stdout.decode().splitlines()
        assert lines[-1] == "413", out
        assert "larger than the limit of 52428 bytes" in lines[0], out
        # Still serving.
        assert client(base).completions.create(model="model", prompt="ok", max_tokens=2).choices
    finally:
        proc.kill()


def test_a_silent_client_is_dropped_and_a_trickling_one_does_not_block_shutdown(model_dir):
    base, proc = start_server(model_dir, "--read_timeout", "1", "--shutdown_grace", "1")
    port = int(base.rsplit(":", 1)[1])
    # Half a request, then silence: the server hangs up after the read timeout.
    silent = socket.create_connection(("127.0.0.1", port))
    silent.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    silent.settimeout(10)
    start = time.time()
    answer = b""
    while chunk := silent.recv(1000):  # at most an error status, then the connection closes
        answer += chunk
    assert time.time() - start < 5, answer
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    # A client trickling header bytes (each within the read timeout) while SIGTERM arrives: the
    # server exits after the grace period instead of waiting for it forever.
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\n")
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    start = time.time()
    while proc.poll() is None and time.time() - start < 20:
        try:
            slow.sendall(b"X")
        except OSError:
            pass
        time.sleep(0.5)
    assert proc.poll() == 0, "still running 20 s after SIGTERM"
    assert time.time() - start < 10
    assert "closed 1 connection(s) still open" in proc.stdout.read()


def test_tensor_parallel_server_answers_like_one_process(server, model_dir):
    """colossal run --nproc_per_node 2 -- infer_llama --tp 2 --serve: rank 0 serves HTTP, both
    ranks step their engines in lockstep; greedy answers (alone, batched, streamed) equal the
    one-process server's, and SIGTERM to the launcher drains, stops the follower, exits."""
    base1, _ = server
    port = free_port()
    proc = subprocess.Popen([f"{APPS}/colossal", "run", "--nproc_per_node", "2", "--", f"{APPS}/infer_llama",
                             "--serve", "--tp", "2", "--model", str(model_dir), "--port", str(port), "--threads", "1",
                             "--served_model_name", "tiny", "--shutdown_grace", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("the tp 2 server exited:\n" + proc.stdout.read())
                time.sleep(0.1)
        else:
            pytest.fail("the tp 2 server did not come up")
        prompts = ["It is a truth", "Chapter 7", "Mr. Bennet said", "She was"]

        def ask(b, p):
            return client(b).completions.create(model="tiny", prompt=p, max_tokens=10, temperature=0).choices[0].text

        expected = {p: ask(base1, p) for p in prompts}
        assert {p: ask(base, p) for p in prompts} == expected, "alone"
        time.sleep(1.5)  # idle: the leader keeps its follower stepping (no collective timeout)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            batched = dict(zip(prompts * 2, pool.map(lambda p: ask(base, p), prompts * 2)))
        assert batched == expected, "batched"
        chunks = client(base).completions.create(model="tiny", prompt=prompts[0], max_tokens=10, temperature=0,
                                                 stream=True)
        assert "".join(c.choices[0].text for c in chunks) == expected[prompts[0]], "streamed"
        sampled = [client(base).completions.create(model="tiny", prompt="It was", max_tokens=10, temperature=0.9,
                                                    seed=7).choices[0].text for _ in range(2)]
        assert sampled[0] == sampled[1] == client(base1).completions.create(
            model="tiny", prompt="It was", max_tokens=10, temperature=0.9, seed=7).choices[0].text
        # (--shutdown_grace 1: the clients' idle keep-alive connections are closed within the
        # launcher's 5 s between SIGTERM and SIGKILL.)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, out  # the launcher reports the signal it was stopped by
        assert "tensor parallel over 2 ranks" in out
        assert "[infer_llama] stopped" in out, "rank 0 drained and stopped its follower:\n" + out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_tensor_parallel_server_ends_when_a_rank_dies(model_dir):
    """A tp 2 server whose rank is killed ends the whole job with a message within seconds (the
    other rank's next lockstep broadcast fails, the launcher stops the rest), never a hang."""
    port = free_port()
    proc = subprocess.Popen([f"{APPS}/colossal", "run", "--nproc_per_node", "2", "--", f"{APPS}/infer_llama",
                             "--serve", "--tp", "2", "--model", str(model_dir), "--port", str(port), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        # The ranks (not the launcher, whose command line names them too).
        ranks = subprocess.run(["pgrep", "-f", f"^{APPS}/infer_llama --serve --tp 2 .*--port {port}"],
                               capture_output=True, text=True).stdout.split()
        assert len(ranks) == 2, ranks
        os.kill(int(ranks[-1]), signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode != 0, out
        assert "failed with signal 9" in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
