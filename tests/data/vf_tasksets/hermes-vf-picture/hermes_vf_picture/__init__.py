"""Name the colour of a picture: an image taskset (hermes-rl's tests: refused on a text-only policy)."""

import verifiers.v1 as vf

PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


class PictureTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    """One red pixel; name its colour."""

    def load(self):
        content = [{"type": "text", "text": "What colour is this?"}, {"type": "image_url", "image_url": {"url": PIXEL}}]
        return [vf.Task(vf.TaskData(idx=0, prompt=[{"role": "user", "content": content}]))]


__all__ = ["PictureTaskset"]
