"""The models, one small builder per task.

Both take raw inputs, so the saved artifact is all a server needs:
  * text: a batch of strings [n, 1]; TextVectorization (with the copier's
    vocabulary) turns them into bag-of-words vectors inside the model;
  * image: uint8 pixels [n, h, w, c]; scaling to [0, 1] happens inside.
Both end in a softmax over the label names, so every task predicts the same way.
"""

import keras


def build_text_model(vocabulary, n_labels, hidden=64, dropout=0.5):
    inputs = keras.Input(shape=(1,), dtype="string", name="text")
    # multi_hot bag of words: robust on short reviews, and averages well across workers
    x = keras.layers.TextVectorization(vocabulary=vocabulary, output_mode="multi_hot", name="vectorize")(inputs)
    x = keras.layers.Dense(hidden, activation="relu", name="hidden")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="text_bow_mlp")


def build_image_model(height, width, channels, n_labels, dropout=0.3):
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = keras.layers.Rescaling(1.0 / 255.0, name="scale")(inputs)
    filters, size = 16, min(height, width)
    while True:  # conv blocks until the feature map is small; 8x8 digits get two, 32x32 images four
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{filters}")(x)
        if size <= 4:
            break
        x = keras.layers.MaxPooling2D(name=f"pool{filters}")(x)
        filters, size = filters * 2, size // 2
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(64, activation="relu", name="hidden")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="image_cnn")


def build_model(manifest, vocabulary=None):
    if manifest.task == "text":
        return build_text_model(vocabulary, len(manifest.labels))
    spec = manifest.input
    return build_image_model(spec["height"], spec["width"], spec["channels"], len(manifest.labels))
