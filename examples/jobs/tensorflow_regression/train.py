"""A small TensorFlow (Keras) job: fit y = 3x - 2 plus noise, report the learnt weights."""

import json
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out

import numpy as np
import tensorflow as tf

tf.random.set_seed(7)
rng = np.random.default_rng(7)
x = rng.uniform(-1, 1, size=(512, 1)).astype("float32")
y = 3 * x - 2 + rng.normal(0, 0.05, size=(512, 1)).astype("float32")

model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")


class Progress(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"[epoch {epoch + 1}] loss {logs['loss']:.4f}", flush=True)


model.fit(x, y, epochs=20, batch_size=64, verbose=0, callbacks=[Progress()])
weight, bias = (float(v.numpy().ravel()[0]) for v in model.layers[0].weights)
print(f"learnt y = {weight:.3f}x + {bias:.3f} (true: 3x - 2)", flush=True)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/metrics.json").write_text(json.dumps({"weight": weight, "bias": bias}))
