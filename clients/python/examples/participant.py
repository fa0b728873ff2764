import os, signal, threading
import twophase

coord = twophase.Coordinator(os.environ.get("COORDINATOR_URL", "http://127.0.0.1:8080"))
coord.put_job("orders", ["py-sink"])  # once, by whoever runs the job
stop = threading.Event()
signal.signal(signal.SIGINT, lambda *_: stop.set())

def prepare(checkpoint):  # make this checkpoint's writes durable but invisible
    return [{"file": f"orders-{checkpoint}.tmp"}]

def commit(checkpoint, committables):  # make them visible (idempotently), then it acks
    print("committed", checkpoint, committables, flush=True)

def abort(checkpoint, committables):  # throw them away (idempotently)
    print("rolled back", checkpoint, committables, flush=True)

def trigger():  # a checkpoint a second; normally the pipeline's own trigger does this
    while not stop.wait(1.0):
        try: coord.open_checkpoint("orders")
        except twophase.TooManyCheckpoints: pass

threading.Thread(target=trigger, daemon=True).start()
twophase.Runner(coord, "orders", "py-sink", prepare=prepare, commit=commit, abort=abort).run(stop)
