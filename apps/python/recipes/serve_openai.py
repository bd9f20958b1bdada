"""Serve a LLaMA model directory with the OpenAI-compatible API and query it with the `openai` client.

    colossal run --nproc_per_node 2 python apps/python/recipes/serve_openai.py --model_dir out/llama/model

Rank 0 serves (colossal.llama.Server: the paged-KV engine behind POST /v1/completions and
/v1/chat/completions) on a free port it tells the other ranks; every rank is then a client: a
completion and a streamed chat answer through the official `openai` package, requests from all
ranks batched together by the engine. With --keep_serving, rank 0 goes on serving until Ctrl-C.
"""
import argparse
import socket

import openai
import torch

import colossal


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", default="out/llama/model")
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    p.add_argument("--prompt", default="It is a truth universally acknowledged")
    p.add_argument("--max_tokens", type=int, default=16)
    p.add_argument("--keep_serving", action="store_true", help="rank 0 serves on after the clients are done")
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args()
    rank, world = colossal.launch()
    server = None
    port = torch.tensor([a.port or (free_port() if rank == 0 else 0)], dtype=torch.int64)
    colossal.dist.broadcast(port, 0)  # every client learns rank 0's port
    if rank == 0:
        server = colossal.llama.Server(a.model_dir, port=int(port.item()), served_model_name="llama").start()
        print(f"serving {a.model_dir} at {server.url}/v1", flush=True)
    colossal.dist.barrier()  # the server listens before anyone asks

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{int(port.item())}/v1", api_key="not-needed")
    completion = client.completions.create(model="llama", prompt=a.prompt, max_tokens=a.max_tokens, temperature=0)
    print(f"completion: {a.prompt!r} -> {completion.choices[0].text!r} "
          f"({completion.usage.completion_tokens} tokens, finish {completion.choices[0].finish_reason})", flush=True)
    stream = client.chat.completions.create(model="llama", max_tokens=a.max_tokens, temperature=0.8, seed=rank,
                                            messages=[{"role": "user", "content": f"Hello from rank {rank}"}],
                                            stream=True)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    print(f"chat (streamed in {len(pieces)} chunks): {''.join(pieces)!r}", flush=True)

    colossal.dist.barrier()  # every client is done
    if server is not None:
        if a.keep_serving:
            print("serving until Ctrl-C", flush=True)
            server.wait()  # then stops, as colossal.llama.serve does
        server.stop()
        print("server stopped", flush=True)

if __name__ == "__main__":
    main()
