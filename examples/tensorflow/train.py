"""Tiny Keras model trained with TF2 MultiWorkerMirroredStrategy.

Ordinary user code: TensorFlow finds its peers from TF_CONFIG, which Azure ML
sets for each worker of a `tensorflow` distribution, e.g.

    TF_CONFIG='{"cluster": {"worker": ["host0:2222", "host1:2222"]},
                "task": {"type": "worker", "index": 0}}'

Without TF_CONFIG it trains as a single worker on the local devices.

    python train.py --epochs 3 --model-dir ./outputs

At the end every worker prints one line
    TRAINSPEC_RESULT {"script": "tensorflow", "rank": ..., "allreduce": ..., ...}
where rank is the worker's place in the cluster (chief first), world_size the
number of workers, `allreduce` the cross-worker sum of 1 per worker, and
`master` the address of the first worker (TF has no MASTER_ADDR).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

FEATURES = 16
CLASSES = 4
SAMPLES = 512


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--model-dir", default="./outputs", help="where the chief saves the model")
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    return parser.parse_args(argv)


def cluster_position(tf_config):
    """(rank, number of workers, first address) from a parsed TF_CONFIG."""
    cluster = tf_config.get("cluster", {})
    members = [("chief", i) for i in range(len(cluster.get("chief", [])))]
    members += [("worker", i) for i in range(len(cluster.get("worker", [])))]
    if not members:
        return 0, 1, ":"
    task = tf_config.get("task", {})
    rank = members.index((task.get("type", "worker"), int(task.get("index", 0))))
    kind, index = members[0]
    return rank, len(members), cluster[kind][index]


def print_result(script, rank, world_size, local_rank, node_rank, allreduce, master):
    result = {
        "script": script, "rank": rank, "world_size": world_size, "local_rank": local_rank,
        "node_rank": node_rank, "allreduce": allreduce, "master": master,
    }
    # One write call, so lines from several processes sharing a pipe never interleave.
    sys.stdout.write("TRAINSPEC_RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(argv)

    import tensorflow as tf

    # Keras 3 (the tf.keras of TensorFlow 2.16 and later) cannot fit under
    # MultiWorkerMirroredStrategy (keras-team/keras#20585), so use Keras 2: the
    # tf_keras package on TF >= 2.16, tf.keras itself on older releases.
    try:
        import tf_keras as keras
    except ImportError:
        from tensorflow import keras

    # The strategy must be created before any other TensorFlow op.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank, num_workers, master = cluster_position(json.loads(os.environ.get("TF_CONFIG") or "{}"))
    is_chief = rank == 0

    rng = tf.random.Generator.from_seed(0)
    features = rng.normal((SAMPLES, FEATURES))
    labels = rng.uniform((SAMPLES,), maxval=CLASSES, dtype=tf.int64)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shuffle(SAMPLES, seed=0)
        .repeat()
        .batch(args.batch_size * num_workers)  # the global batch
        .with_options(options)
    )

    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ])
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=0.05),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2 if is_chief else 0)

    # Every worker must save (saving can involve collectives); only the chief's copy is kept.
    write_dir = args.model_dir if is_chief else tempfile.mkdtemp(prefix=f"worker{rank}-")
    os.makedirs(write_dir, exist_ok=True)
    model.save(os.path.join(write_dir, "model.keras"))
    if not is_chief:
        shutil.rmtree(write_dir, ignore_errors=True)

    # Each of the worker's local replicas contributes 1/local_replicas, so the sum counts workers.
    local_replicas = max(strategy.num_replicas_in_sync // num_workers, 1)
    per_replica = strategy.run(lambda: tf.constant(1.0 / local_replicas))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    print_result("tensorflow", rank, num_workers, 0, rank, int(round(float(total))), master)


if __name__ == "__main__":
    main()
